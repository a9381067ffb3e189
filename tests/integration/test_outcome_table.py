"""Every RPC of every service, called with each role of a second tenant, against its own
tenant's objects and another tenant's: the outcome table the tenancy promises.

The outside review found a tenant's ``admin`` token to be a cluster superuser (it read another
tenant's executions, raised its own quota, minted a ``default`` admin token). This walks the
services' descriptors, so an RPC added later without a row here fails the test instead of
going unchecked. A foreign object must answer exactly as a missing one does (NOT_FOUND), or
be refused for the role (PERMISSION_DENIED); nothing of another tenant's is ever OK but for
the cluster admin.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from flux.client import FluxClient
from flux.client.requests import workflow_request
from flux.registration.loader import load_workflow_file
from flux.security import Credentials, Role
from flux.testing import Cluster
from flux.v1 import batches_pb2, control_pb2, limits_pb2, pools_pb2, schedules_pb2, tenants_pb2, worker_pb2

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.backends("sqlite")]

OK, DENIED, MISSING, TAKEN = "OK", "PERMISSION_DENIED", "NOT_FOUND", "FAILED_PRECONDITION"
ROLES = ("read", "submit", "admin", "cluster-admin")
SERVICES = {
    "ControlService": control_pb2,
    "PoolService": pools_pb2,
    "LimitService": limits_pb2,
    "BatchService": batches_pb2,
    "ScheduleService": schedules_pb2,
    "TenantService": tenants_pb2,
    "WorkerService": worker_pb2,
}
# An execution that no worker can ever take: it stays CREATED, so it can be read and cancelled.
PARKED = """
from flux import ExecutionContext, workflow


@workflow.with_options(name="{name}", affinity={{"zone": "nowhere"}})
async def parked(ctx: ExecutionContext[object]):
    return ctx.input
"""
_names = itertools.count()


def _unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


@dataclass
class Fleet:
    """Two tenants, ``ml`` (the caller's own) and ``web`` (another), each with a parked workflow."""

    cluster: Cluster
    tmp: Path
    clients: dict[str, FluxClient]  # "ml", "web": submit tokens of each tenant

    def source(self, name: str) -> Path:
        path = self.tmp / f"{name}.py"
        path.write_text(PARKED.format(name=name))
        return path

    def workflow_file(self, name: str) -> control_pb2.RegisterWorkflowRequest:
        return workflow_request(load_workflow_file(self.source(name)))

    def parked(self, tenant: str) -> str:
        """A new CREATED execution of ``tenant``'s."""
        return self.clients[tenant].run(f"{tenant}_parked", {}).execution_id

    def batch(self, tenant: str) -> str:
        """A new batch of ``tenant``'s (one parked member, throttled): one to read and cancel."""
        return self.clients[tenant].map(f"{tenant}_parked", [{}], max_concurrent=1).batch_id

    def spare_token(self, tenant: str) -> str:
        """The id of a new read token of ``tenant``'s, minted by the cluster admin: one to revoke."""
        return self.cluster.client.tenants.create_token(tenant, role="read").id  # type: ignore[attr-defined]

    def spare_limit(self, tenant: str) -> str:
        """A new named limit of ``tenant``'s, made by the cluster admin: one to delete."""
        name = _unique("spare")
        self.cluster.client.limits.create(name, tenant=tenant, concurrency=1)  # type: ignore[attr-defined]
        return name

    def spare_schedule(self, tenant: str) -> str:
        """A new schedule of ``tenant``'s, made by the cluster admin: one to delete."""
        name = _unique("spare")
        self.cluster.client.schedules.create(name, tenant=tenant, workflow=f"{tenant}_parked", every="1h")  # type: ignore[attr-defined]
        return name

    def finished(self, tenant: str) -> str:
        """A new CANCELLED execution of ``tenant``'s: one a wait answers at once."""
        execution_id = self.parked(tenant)
        self.clients[tenant].cancel(execution_id)
        return execution_id


# Each RPC: how to build its request for the caller's own tenant and for the other one.
Build = Callable[[Fleet, str], Any]


def _own_or_foreign(own: str) -> Callable[[str], str]:
    return lambda target: own if target == "own" else "web"


def _tenant(target: str) -> str:
    return "ml" if target == "own" else "web"


REQUESTS: dict[str, Build] = {
    # ControlService
    "RegisterWorkflow": lambda f, t: f.workflow_file(_unique("ml_new") if t == "own" else "web_parked"),
    "RunWorkflow": lambda f, t: control_pb2.RunWorkflowRequest(
        workflow_name=f"{_tenant(t)}_parked", input_json="{}"
    ),
    "GetExecution": lambda f, t: control_pb2.GetExecutionRequest(execution_id=f.parked(_tenant(t))),
    "WatchExecution": lambda f, t: control_pb2.WatchExecutionRequest(execution_id=f.parked(_tenant(t))),
    "CancelExecution": lambda f, t: control_pb2.CancelExecutionRequest(execution_id=f.parked(_tenant(t))),
    "RetryExecution": lambda f, t: control_pb2.RetryExecutionRequest(execution_id=f.finished(_tenant(t))),
    "ListWorkers": lambda f, t: control_pb2.ListWorkersRequest(),
    "ExplainExecution": lambda f, t: control_pb2.ExplainExecutionRequest(execution_id=f.parked(_tenant(t))),
    "GetStatus": lambda f, t: control_pb2.GetStatusRequest(),
    "GetMetrics": lambda f, t: control_pb2.GetMetricsRequest(),
    "ListExecutions": lambda f, t: control_pb2.ListExecutionsRequest(),
    "ListWorkflows": lambda f, t: control_pb2.ListWorkflowsRequest(name=f"{_tenant(t)}_parked"),
    "PauseWorker": lambda f, t: control_pb2.PauseWorkerRequest(name="w1"),
    "ResumeWorker": lambda f, t: control_pb2.ResumeWorkerRequest(name="w1"),
    "ForgetWorker": lambda f, t: control_pb2.ForgetWorkerRequest(name="never-joined"),
    "WatchFleet": lambda f, t: control_pb2.WatchFleetRequest(),
    "RunWorkflows": lambda f, t: control_pb2.RunWorkflowsRequest(
        workflow_name=f"{_tenant(t)}_parked", input_json=["{}"]
    ),
    "RunAndWait": lambda f, t: control_pb2.RunAndWaitRequest(
        run=control_pb2.RunWorkflowRequest(workflow_name=f"{_tenant(t)}_parked", input_json="{}")
    ),
    "WaitExecutions": lambda f, t: control_pb2.WaitExecutionsRequest(execution_ids=[f.finished(_tenant(t))]),
    "RunAndWaitStream": lambda f, t: control_pb2.RunAndWaitStreamRequest(
        run=control_pb2.RunWorkflowRequest(workflow_name=f"{_tenant(t)}_parked", input_json="{}")
    ),
    # PoolService
    "ApplyPools": lambda f, t: pools_pb2.ApplyPoolsRequest(
        pools=[pools_pb2.PoolSpec(name=_unique("pool"), max_workers=2)]
    ),
    "ListPools": lambda f, t: pools_pb2.ListPoolsRequest(),
    "GetPool": lambda f, t: pools_pb2.GetPoolRequest(name="never-declared"),
    # LimitService
    "CreateLimit": lambda f, t: limits_pb2.CreateLimitRequest(
        limit=limits_pb2.Limit(name=_unique("l"), concurrency=1), tenant=_tenant(t)
    ),
    "SetLimit": lambda f, t: limits_pb2.SetLimitRequest(
        name="shared", changes_json='{"concurrency": 3}', tenant=_tenant(t)
    ),
    "DeleteLimit": lambda f, t: limits_pb2.DeleteLimitRequest(
        name=f.spare_limit(_tenant(t)), tenant=_tenant(t)
    ),
    "ListLimits": lambda f, t: limits_pb2.ListLimitsRequest(tenant=_tenant(t)),
    "GetLimit": lambda f, t: limits_pb2.GetLimitRequest(name="shared", tenant=_tenant(t)),
    "ApplyLimits": lambda f, t: limits_pb2.ApplyLimitsRequest(
        limits=[limits_pb2.Limit(name="shared", concurrency=5)], tenant=_tenant(t)
    ),
    # BatchService
    "GetBatch": lambda f, t: batches_pb2.GetBatchRequest(batch_id=f.batch(_tenant(t))),
    "WatchBatch": lambda f, t: batches_pb2.WatchBatchRequest(batch_id=f.batch(_tenant(t))),
    "CancelBatch": lambda f, t: batches_pb2.CancelBatchRequest(batch_id=f.batch(_tenant(t))),
    # ScheduleService
    "CreateSchedule": lambda f, t: schedules_pb2.CreateScheduleRequest(
        schedule=schedules_pb2.Schedule(name=_unique("s"), workflow=f"{_tenant(t)}_parked", every="1h"),
        tenant=_tenant(t),
    ),
    "ListSchedules": lambda f, t: schedules_pb2.ListSchedulesRequest(tenant=_tenant(t)),
    "GetSchedule": lambda f, t: schedules_pb2.GetScheduleRequest(name="shared", tenant=_tenant(t)),
    "PauseSchedule": lambda f, t: schedules_pb2.PauseScheduleRequest(name="shared", tenant=_tenant(t)),
    "ResumeSchedule": lambda f, t: schedules_pb2.ResumeScheduleRequest(name="shared", tenant=_tenant(t)),
    "TriggerSchedule": lambda f, t: schedules_pb2.TriggerScheduleRequest(name="shared", tenant=_tenant(t)),
    "DeleteSchedule": lambda f, t: schedules_pb2.DeleteScheduleRequest(
        name=f.spare_schedule(_tenant(t)), tenant=_tenant(t)
    ),
    "ApplySchedules": lambda f, t: schedules_pb2.ApplySchedulesRequest(
        schedules=[schedules_pb2.Schedule(name="shared", workflow=f"{_tenant(t)}_parked", every="2h")],
        tenant=_tenant(t),
    ),
    # TenantService
    "CreateTenant": lambda f, t: tenants_pb2.CreateTenantRequest(
        tenant=tenants_pb2.Tenant(name=_unique("t"))
    ),
    "ListTenants": lambda f, t: tenants_pb2.ListTenantsRequest(),
    "GetTenant": lambda f, t: tenants_pb2.GetTenantRequest(name=_tenant(t)),
    "SetTenant": lambda f, t: tenants_pb2.SetTenantRequest(name=_tenant(t), changes_json='{"cpu": 1000}'),
    "DeleteTenant": lambda f, t: tenants_pb2.DeleteTenantRequest(name=_tenant(t) + "-spare"),
    "ApplyTenants": lambda f, t: tenants_pb2.ApplyTenantsRequest(
        tenants=[tenants_pb2.Tenant(name=_tenant(t), weight=5)]
    ),
    "CreateToken": lambda f, t: tenants_pb2.CreateTokenRequest(tenant=_tenant(t), role="read"),
    "ListTokens": lambda f, t: tenants_pb2.ListTokensRequest(tenant=_tenant(t)),
    "RevokeToken": lambda f, t: tenants_pb2.RevokeTokenRequest(id=f.spare_token(_tenant(t))),
    "ListAudit": lambda f, t: tenants_pb2.ListAuditRequest(),
}


def _by_role(**outcomes: tuple[str, str]) -> dict[str, tuple[str, str]]:
    return {role.replace("_", "-"): outcome for role, outcome in outcomes.items()}


def _everyone(outcome: tuple[str, str]) -> dict[str, tuple[str, str]]:
    return dict.fromkeys(ROLES, outcome)


def _cluster_only(cluster: tuple[str, str] = (OK, OK)) -> dict[str, tuple[str, str]]:
    return {**_everyone((DENIED, DENIED)), "cluster-admin": cluster}


def _reads_own(least: str = "read") -> dict[str, tuple[str, str]]:
    """Allowed from ``least`` up, on the caller's own tenant's; another's is missing but to a cluster admin."""
    allowed = ROLES[ROLES.index(least) :]
    return {
        role: (OK, OK) if role == "cluster-admin" else (OK, MISSING) if role in allowed else (DENIED, DENIED)
        for role in ROLES
    }


# service method -> role -> (outcome on its own tenant's, outcome on the other tenant's)
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    # A tenant's admin registers into its own tenant only: a name another tenant holds stays theirs
    # (the refusal does not say whose), and a cluster admin registers into default, likewise.
    "RegisterWorkflow": _by_role(
        read=(DENIED, DENIED), submit=(DENIED, DENIED), admin=(OK, TAKEN), cluster_admin=(OK, TAKEN)
    ),
    "RunWorkflow": _reads_own("submit"),
    "GetExecution": _reads_own(),
    "WatchExecution": _reads_own(),
    "CancelExecution": _reads_own("submit"),
    "ListWorkers": _everyone((OK, OK)),
    "ExplainExecution": _reads_own(),
    "GetStatus": _everyone((OK, OK)),
    "GetMetrics": _everyone((OK, OK)),
    "ListExecutions": _everyone((OK, OK)),
    "ListWorkflows": _reads_own(),
    "PauseWorker": _cluster_only(),
    "ResumeWorker": _cluster_only(),
    "ForgetWorker": _cluster_only((MISSING, MISSING)),
    "WatchFleet": _everyone((OK, OK)),
    "RunWorkflows": _reads_own("submit"),
    "RunAndWait": _reads_own("submit"),
    "WaitExecutions": _reads_own(),
    "RunAndWaitStream": _reads_own("submit"),
    # A new attempt of a FAILED execution: the one here was cancelled, so an allowed caller is told
    # it cannot be retried, and another tenant's answers as a missing one.
    "RetryExecution": _by_role(
        read=(DENIED, DENIED), submit=(TAKEN, MISSING), admin=(TAKEN, MISSING), cluster_admin=(TAKEN, TAKEN)
    ),
    "ApplyPools": _cluster_only(),
    "ListPools": _everyone((OK, OK)),
    "GetPool": _everyone((MISSING, MISSING)),
    # Any role reads its own tenant's limits; a tenant admin changes them; another tenant's is missing.
    "CreateLimit": _reads_own("admin"),
    "SetLimit": _reads_own("admin"),
    "DeleteLimit": _reads_own("admin"),
    "ListLimits": _reads_own(),
    "GetLimit": _reads_own(),
    "ApplyLimits": _reads_own("admin"),
    # Any role reads its own tenant's batches, submit cancels them; another tenant's is missing.
    "GetBatch": _reads_own(),
    "WatchBatch": _reads_own(),
    "CancelBatch": _reads_own("submit"),
    # Any role reads its own tenant's schedules; a submit token triggers one (a run); a tenant admin
    # changes them; another tenant's is missing.
    "CreateSchedule": _reads_own("admin"),
    "ListSchedules": _reads_own(),
    "GetSchedule": _reads_own(),
    "PauseSchedule": _reads_own("admin"),
    "ResumeSchedule": _reads_own("admin"),
    "TriggerSchedule": _reads_own("submit"),
    "DeleteSchedule": _reads_own("admin"),
    "ApplySchedules": _reads_own("admin"),
    "CreateTenant": _cluster_only(),
    # A tenant admin reads its own tenant's terms; another tenant answers as one that does not exist.
    "ListTenants": _by_role(
        read=(DENIED, DENIED), submit=(DENIED, DENIED), admin=(OK, OK), cluster_admin=(OK, OK)
    ),
    "GetTenant": _reads_own("admin"),
    # Quotas are the cluster's: no tenant raises its own (the review's "flux tenant set ml --cpu 1000").
    "SetTenant": _cluster_only(),
    "DeleteTenant": _cluster_only(),
    "ApplyTenants": _cluster_only(),
    # A tenant admin mints tokens of its own tenant only (the review's "token create --tenant default").
    "CreateToken": _by_role(
        read=(DENIED, DENIED), submit=(DENIED, DENIED), admin=(OK, DENIED), cluster_admin=(OK, OK)
    ),
    # Another tenant's tokens answer as ones that do not exist; the audit trail is scoped by the
    # servicer (test_tokens_audit: a tenant admin reads the entries about its own tenant only).
    "ListTokens": _reads_own("admin"),
    "RevokeToken": _reads_own("admin"),
    "ListAudit": _by_role(
        read=(DENIED, DENIED), submit=(DENIED, DENIED), admin=(OK, OK), cluster_admin=(OK, OK)
    ),
}


def _methods() -> Iterator[tuple[str, str, Any]]:
    for service, module in SERVICES.items():
        for method in module.DESCRIPTOR.services_by_name[service].methods:
            yield service, method.name, method


def _call(channel: grpc.Channel, token: str, service: str, method: Any, request: Any) -> str:
    """The call's status code name; a stream is OK when its first message arrives."""
    path = f"/flux.v1.{service}/{method.name}"
    response_type = _message_class(method.output_type)
    metadata = Credentials(token).metadata
    kwargs: dict[str, Any] = {"metadata": metadata, "timeout": 10}
    try:
        if method.client_streaming and method.server_streaming:
            call = channel.stream_stream(path, lambda m: m.SerializeToString(), response_type.FromString)
            stream = call(iter([request]), **kwargs)
            first = next(stream)
            stream.cancel()
            if first.WhichOneof("answer") == "refused":  # a run refused in the stream, not the call
                return str(first.refused.code)
        elif method.server_streaming:
            stream = channel.unary_stream(path, lambda m: m.SerializeToString(), response_type.FromString)(
                request, **kwargs
            )
            next(stream)
            stream.cancel()
        else:
            channel.unary_unary(path, lambda m: m.SerializeToString(), response_type.FromString)(
                request, **kwargs
            )
    except grpc.RpcError as exc:
        return exc.code().name  # type: ignore[attr-defined]
    return OK


def _message_class(descriptor: Any) -> Any:
    module = next(m for m in SERVICES.values() if descriptor.file.name == m.DESCRIPTOR.name)
    return getattr(module, descriptor.name)


@pytest.fixture
def fleet(cluster: Cluster, tmp_path: Path) -> Iterator[Fleet]:
    admin = cluster.client
    admin.tenants.apply([{"name": n} for n in ("ml", "web", "ml-spare", "web-spare")])
    tokens = {t: admin.tenants.create_token(t, role="admin") for t in ("ml", "web")}
    for tenant in ("ml", "web"):
        admin.limits.apply([{"name": "shared", "concurrency": 5}], tenant=tenant)
    clients: dict[str, FluxClient] = {}
    for tenant, token in tokens.items():
        clients[tenant] = FluxClient(cluster.address, timeout=10, credentials=Credentials(token, cluster.ca))
    built = Fleet(cluster, tmp_path, clients)
    for tenant in ("ml", "web"):
        clients[tenant].register_file(built.source(f"{tenant}_parked"))
        admin.schedules.apply(
            [{"name": "shared", "workflow": f"{tenant}_parked", "every": "1h"}], tenant=tenant
        )
    cluster.start_worker("w1")
    try:
        yield built
    finally:
        for client in clients.values():
            client.close()


def test_every_rpc_of_every_service_has_a_row() -> None:
    methods = {name for _, name, _ in _methods()}
    assert methods - set(EXPECTED) - {m for s, m, _ in _methods() if s == "WorkerService"} == set()
    assert set(EXPECTED) <= methods and set(REQUESTS) == set(EXPECTED)


def test_the_outcome_table_for_each_role_of_a_second_tenant(fleet: Fleet) -> None:
    cluster = fleet.cluster
    tokens = {
        role: cluster.client.tenants.create_token("ml", role=role) for role in ("read", "submit", "admin")
    }
    tokens["cluster-admin"] = cluster.token(Role.CLIENT)
    seen: dict[tuple[str, str, str], str] = {}
    wanted: dict[tuple[str, str, str], str] = {}
    with grpc.insecure_channel(cluster.address) as channel:
        for service, name, method in _methods():
            for role, token in tokens.items():
                if service == "WorkerService":
                    # An API token of any role is refused by the worker service: workers hold the worker token.
                    request = _message_class(method.input_type)()
                    seen[(name, role, "own")] = _call(channel, token, service, method, request)
                    wanted[(name, role, "own")] = DENIED
                    continue
                for index, target in enumerate(("own", "foreign")):
                    request = REQUESTS[name](fleet, target)
                    seen[(name, role, target)] = _call(channel, token, service, method, request)
                    wanted[(name, role, target)] = EXPECTED[name][role][index]
    wrong = {key: (seen[key], expected) for key, expected in wanted.items() if seen[key] != expected}
    assert wrong == {}, "\n".join(f"{k}: got {got}, want {want}" for k, (got, want) in sorted(wrong.items()))


def test_what_a_tenant_admin_reads_stays_inside_its_tenant(fleet: Fleet) -> None:
    cluster = fleet.cluster
    web_id = fleet.parked("web")
    ml_id = fleet.parked("ml")
    admin = cluster.client.tenants.create_token("ml", role="admin")
    with FluxClient(cluster.address, timeout=10, credentials=Credentials(admin, cluster.ca)) as as_admin:
        listed = {e.execution_id for e in as_admin.list_executions().executions}
        assert ml_id in listed and web_id not in listed
        assert [t.name for t in as_admin.tenants.list()] == ["ml"]
        assert {w.name for w in as_admin.workflows().workflows} >= {"ml_parked"}
        assert "web_parked" not in {w.name for w in as_admin.workflows().workflows}
    # Nothing of the refused changes happened: ml's quota and the default tenant's tokens are as before.
    assert cluster.client.tenants.get("ml").quota.cpu is None
