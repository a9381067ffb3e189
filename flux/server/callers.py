"""Who a client call speaks for, and what its role lets it call.

``flux.security`` knows the server's two configured tokens; this adds the tenants'
tokens (``flux token create``), which live in the store. The interceptor asks
``refine`` about every call, so a role is enforced before a servicer runs; a
servicer asks ``of`` for the caller, to show and change only its tenant's
executions. Without authentication (``--insecure``) every call is the operator's.
"""

from __future__ import annotations

import logging

import grpc

from flux.dispatcher.state.tenants import INVALID, OPERATOR, RANK, Caller, TenantDirectory
from flux.errors import PermissionDenied, Unauthenticated, logged_refusal, status_of
from flux.security import Role, Tokens, bearer

log = logging.getLogger("flux.server")

# Methods that change what every tenant shares: only a cluster admin may call them. Any
# TenantService method not named in TENANT_ADMIN below is one too, so a method added there
# later is closed until someone decides otherwise.
CLUSTER_ADMIN_ONLY = frozenset(
    {
        "/flux.v1.ControlService/ForgetWorker",
        "/flux.v1.ControlService/PauseWorker",
        "/flux.v1.ControlService/ResumeWorker",
        "/flux.v1.PoolService/ApplyPools",
    }
)
CLUSTER_ADMIN_SERVICES = ("/flux.v1.TenantService/",)
# Methods a tenant's admin may call, within its own tenant (the servicer keeps it there).
TENANT_ADMIN = frozenset(
    {
        "/flux.v1.ControlService/RegisterWorkflow",
        "/flux.v1.TenantService/ListTenants",
        "/flux.v1.TenantService/GetTenant",
        "/flux.v1.TenantService/CreateToken",
        "/flux.v1.TenantService/ListTokens",
        "/flux.v1.TenantService/RevokeToken",
        "/flux.v1.TenantService/ListAudit",
        "/flux.v1.LimitService/CreateLimit",
        "/flux.v1.LimitService/SetLimit",
        "/flux.v1.LimitService/DeleteLimit",
        "/flux.v1.LimitService/ApplyLimits",
        "/flux.v1.ScheduleService/CreateSchedule",
        "/flux.v1.ScheduleService/PauseSchedule",
        "/flux.v1.ScheduleService/ResumeSchedule",
        "/flux.v1.ScheduleService/DeleteSchedule",
        "/flux.v1.ScheduleService/ApplySchedules",
    }
)
# Methods that change a tenant's own work: a read token may not call them.
WRITES = frozenset(
    {
        "/flux.v1.ControlService/RunWorkflow",
        "/flux.v1.ControlService/RunWorkflows",
        "/flux.v1.ControlService/RunAndWait",
        "/flux.v1.ControlService/RunAndWaitStream",
        "/flux.v1.ControlService/CancelExecution",
        "/flux.v1.ControlService/RetryExecution",
        "/flux.v1.BatchService/CancelBatch",
        "/flux.v1.ScheduleService/TriggerSchedule",
    }
)


def needs(method: str) -> str:
    """The least role that may call ``method``."""
    if method in TENANT_ADMIN:
        return "admin"
    if method in CLUSTER_ADMIN_ONLY or method.startswith(CLUSTER_ADMIN_SERVICES):
        return "cluster-admin"
    if method in WRITES:
        return "submit"
    return "read"


def permitted(caller: Caller, method: str) -> str:
    """ "" when ``caller``'s role may call ``method``; else why not (never the token).

    The role alone decides here; which tenant a call may touch is the servicer's to
    decide (``Caller.sees``, ``Caller.scope``), from the caller's tenant.
    """
    required = needs(method)
    if RANK[caller.role] >= RANK[required]:
        return ""
    article = "an" if required == "admin" else "a"
    return (
        f"a {caller.role} token of tenant {caller.tenant} cannot call {method}; "
        f"it needs {article} {required} token"
    )


WORKER_SERVICE = "/flux.v1.WorkerService/"


class Callers:
    def __init__(self, tokens: Tokens | None, directory: TenantDirectory):
        self.tokens = tokens
        self.directory = directory

    async def caller(self, token: str) -> Caller | None:
        """Who ``token`` speaks for (its ``token_id`` too, for the audit trail), or None."""
        if self.tokens is None:
            return OPERATOR
        if token and self.tokens.role_of(token) is Role.CLIENT:
            return OPERATOR
        return await self.directory.caller(token) if token else None

    async def refine(
        self, refusal: tuple[grpc.StatusCode, str] | None, method: str, token: str
    ) -> tuple[grpc.StatusCode, str] | None:
        """The interceptor's answer with tenants' tokens: ``refusal`` is flux.security's, on its two tokens."""
        if refusal is not None and refusal[0] is grpc.StatusCode.UNAUTHENTICATED and token:
            try:
                found = await self.directory.lookup(token)
            except Exception as exc:
                # The store away (PostgreSQL restarting): UNAVAILABLE, which callers retry. Raised
                # from the interceptor, grpc answered it UNKNOWN and logged a traceback per call.
                error = logged_refusal(exc, self.directory.store.unavailable, log, "checking an api token")
                return status_of(error)[0], str(error)
            if isinstance(found, str):
                # An expired or revoked token is told so; one never issued gets flux.security's words.
                return refusal if found == INVALID else (grpc.StatusCode.UNAUTHENTICATED, found)
            worker_call = method.startswith(WORKER_SERVICE)
            if found.worker:
                # A pool's worker token: the worker service only (Register keeps it in its pool).
                if worker_call:
                    return None
                return (
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"a worker token cannot call {method}; use an api token",
                )
            if self.tokens is not None and worker_call:
                return (
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"an api token cannot call {method}; use the worker token",
                )
            why = permitted(found, method)
            return (grpc.StatusCode.PERMISSION_DENIED, why) if why else None
        return refusal

    async def of(self, context: grpc.aio.ServicerContext) -> Caller:
        """The caller of a call the interceptor let through."""
        token = bearer(context.invocation_metadata())
        if self.tokens is None or (token and self.tokens.role_of(token) is Role.CLIENT):
            return OPERATOR
        found = await self.directory.lookup(token) if token else INVALID
        if isinstance(found, str):
            raise Unauthenticated(found)
        return found

    async def worker_pool(self, context: grpc.aio.ServicerContext) -> str | None:
        """The pool a worker call's token binds it to; None for the fleet's worker token (any pool)."""
        token = bearer(context.invocation_metadata())
        if self.tokens is None or not token or self.tokens.role_of(token) is Role.WORKER:
            return None
        found = await self.directory.lookup(token)
        if isinstance(found, str):
            raise Unauthenticated(found)
        if not found.worker:
            raise PermissionDenied("an api token cannot register a worker; use a worker token")
        return found.pool

    def check(self, caller: Caller, method: str) -> None:
        why = permitted(caller, method)
        if why:
            raise PermissionDenied(why)
