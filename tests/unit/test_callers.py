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
        pytest.param("admin", "/flux.v1.TenantService/SetTenant", False, id="admin cannot change a quota"),
        pytest.param("admin", "/flux.v1.TenantService/CreateTenant", False, id="admin cannot create tenants"),
        pytest.param("admin", "/flux.v1.TenantService/ApplyTenants", False, id="admin cannot apply tenants"),
        pytest.param("admin", "/flux.v1.TenantService/DeleteTenant", False, id="admin cannot delete tenants"),
        pytest.param(
            "admin", "/flux.v1.TenantService/NotYetWritten", False, id="a new tenant method is closed"
        ),
        pytest.param("admin", CONTROL + "PauseWorker", False, id="admin cannot pause the fleet's workers"),
        pytest.param("admin", "/flux.v1.PoolService/ApplyPools", False, id="admin cannot apply pools"),
        pytest.param(
            "cluster-admin", "/flux.v1.TenantService/SetTenant", True, id="cluster admin sets quotas"
        ),
        pytest.param(
            "cluster-admin", "/flux.v1.PoolService/ApplyPools", True, id="cluster admin applies pools"
        ),
        pytest.param("cluster-admin", CONTROL + "ForgetWorker", True, id="cluster admin forgets workers"),
    ],
)
def test_roles(role: str, method: str, allowed: bool) -> None:
    why = permitted(Caller("ml", role), method)
    assert (why == "") is allowed
    if not allowed:
        assert "tenant ml" in why and method in why


def test_a_caller_sees_its_tenants_executions_and_a_cluster_admin_every_one() -> None:
    execution = Execution("e1", WorkflowRef("echo", 1, "0" * 64, "echo"), 1, "null", 3, tenant="web")
    assert Caller("web", "read").sees(execution)
    assert not Caller("ml", "submit").sees(execution)
    # A tenant's admin administers its own tenant, not the cluster (the outside review's first finding).
    assert not Caller("ml", "admin").sees(execution)
    assert Caller("ml", "cluster-admin").sees(execution) and OPERATOR.sees(execution)
    assert Caller("ml", "read").scope == "ml" and Caller("ml", "admin").scope == "ml"
    assert OPERATOR.scope == "" and OPERATOR.cluster_admin


@pytest.mark.parametrize(
    ("role", "grants"),
    [
        ("read", ["read"]),
        ("submit", ["read", "submit"]),
        ("admin", ["read", "submit", "admin"]),
        ("cluster-admin", ["read", "submit", "admin", "cluster-admin"]),
    ],
)
def test_a_token_mints_roles_up_to_its_own(role: str, grants: list[str]) -> None:
    caller = Caller("ml", role)
    assert [r for r in ("read", "submit", "admin", "cluster-admin") if caller.may_grant(r)] == grants
