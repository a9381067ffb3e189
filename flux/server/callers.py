"""Who a client call speaks for, and what its role lets it call.

``flux.auth`` knows the server's two configured tokens; this adds the tenants'
tokens (``flux token create``), which live in the store. The interceptor asks
``refine`` about every call, so a role is enforced before a servicer runs; a
servicer asks ``of`` for the caller, to show and change only its tenant's
executions. Without authentication (``--insecure``) every call is the operator's.
"""

from __future__ import annotations

import grpc

from flux.auth import Role, Tokens, bearer
from flux.dispatcher.state.tenants import OPERATOR, RANK, Caller, TenantDirectory
from flux.errors import PermissionDenied, Unauthenticated

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


class Callers:
    def __init__(self, tokens: Tokens | None, directory: TenantDirectory):
        self.tokens = tokens
        self.directory = directory

    async def caller(self, token: str) -> Caller | None:
        if self.tokens is None:
            return OPERATOR
        if token and self.tokens.role_of(token) is Role.CLIENT:
            return OPERATOR
        return await self.directory.caller(token) if token else None

    async def refine(
        self, refusal: tuple[grpc.StatusCode, str] | None, method: str, token: str
    ) -> tuple[grpc.StatusCode, str] | None:
        """The interceptor's answer with tenants' tokens: ``refusal`` is flux.auth's, on its two tokens."""
        if refusal is not None and refusal[0] is grpc.StatusCode.UNAUTHENTICATED and token:
            found = await self.directory.caller(token)
            if found is None:
                return refusal
            if self.tokens is not None and method.startswith("/flux.v1.WorkerService/"):
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
        found = await self.caller(token)
        if found is None:
            raise Unauthenticated("invalid api token")
        return found

    def check(self, caller: Caller, method: str) -> None:
        why = permitted(caller, method)
        if why:
            raise PermissionDenied(why)
