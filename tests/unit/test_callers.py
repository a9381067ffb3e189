"""Which methods each role of a tenant's token may call (flux.server.callers.permitted)."""

from __future__ import annotations

import pytest

from flux.dispatcher.state.tenants import OPERATOR, Caller
from flux.domain.execution import Execution, WorkflowRef
from flux.server.callers import permitted

CONTROL = "/flux.v1.ControlService/"


@pytest.mark.parametrize(
    ("role", "method", "allowed"),
    [
        pytest.param("read", CONTROL + "GetExecution", True, id="read reads"),
        pytest.param("read", CONTROL + "ListExecutions", True, id="read lists"),
        pytest.param("read", CONTROL + "RunWorkflow", False, id="read cannot run"),
        pytest.param("read", CONTROL + "RunWorkflows", False, id="read cannot run many"),
        pytest.param("read", CONTROL + "RunAndWait", False, id="read cannot run and wait"),
        pytest.param("read", CONTROL + "RunAndWaitStream", False, id="read cannot run and wait on a stream"),
        pytest.param("read", CONTROL + "CancelExecution", False, id="read cannot cancel"),
        pytest.param("submit", CONTROL + "RunWorkflow", True, id="submit runs"),
        pytest.param("submit", CONTROL + "CancelExecution", True, id="submit cancels"),
        pytest.param("submit", CONTROL + "RegisterWorkflow", False, id="submit cannot register"),
        pytest.param("submit", CONTROL + "PauseWorker", False, id="submit cannot pause a worker"),
        pytest.param("submit", CONTROL + "ForgetWorker", False, id="submit cannot forget a worker"),
        pytest.param("submit", "/flux.v1.PoolService/ApplyPools", False, id="submit cannot apply pools"),
        pytest.param("submit", "/flux.v1.PoolService/ListPools", True, id="submit lists pools"),
        pytest.param("submit", "/flux.v1.TenantService/ListTenants", False, id="submit cannot list tenants"),
        pytest.param("admin", "/flux.v1.TenantService/CreateToken", True, id="admin creates tokens"),
        pytest.param("admin", CONTROL + "RegisterWorkflow", True, id="admin registers"),
    ],
)
def test_roles(role: str, method: str, allowed: bool) -> None:
    why = permitted(Caller("ml", role), method)
    assert (why == "") is allowed
    if not allowed:
        assert "tenant ml" in why and method in why


def test_a_caller_sees_its_tenants_executions_and_an_admin_every_one() -> None:
    execution = Execution("e1", WorkflowRef("echo", 1, "0" * 64, "echo"), 1, "null", 3, tenant="web")
    assert Caller("web", "read").sees(execution)
    assert not Caller("ml", "submit").sees(execution)
    assert Caller("ml", "admin").sees(execution) and OPERATOR.sees(execution)
    assert Caller("ml", "read").scope == "ml" and Caller("ml", "admin").scope == ""
