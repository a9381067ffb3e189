"""Tenants and their tokens from Python: ``client.tenants`` (``flux.client`` and ``flux.aio``).

Every call needs an admin API token (the server's own is one). Tenants come
back as ``flux.domain.tenant.Tenant``; terms go in as the fields of a tenants
file (DESIGN §9, §10: ``cpu``, ``memory``, ``gpu``, ``gpu_memory``, ``executions``,
``cohort``, ``borrowing_limit``, ``lending_limit``, ``weight``, ``max_pending``,
``max_pending_bytes``), checked here first so a bad
value is refused naming its field before anything is sent::

    client.tenants.create("ml", gpu=4, cohort="research", borrowing_limit={"gpu": 2})
    token = client.tenants.create_token("ml", role="submit", name="ci", expires_in="30d")
    [t.id for t in client.tenants.list_tokens("ml")]      # never a token's secret
    client.tenants.revoke_token(token.id)                   # at once, on every replica
    client.tenants.audit(since=time.time() - 3600)          # who changed what, newest first

A tenant admin's token manages its own tenant's tokens and reads its own audit entries.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from flux.domain.duration import seconds_of
from flux.domain.tenant import Tenant
from flux.errors import InvalidArgument
from flux.store import AuditRecord, TokenRecord
from flux.v1 import tenants_pb2

__all__ = ["AsyncTenantAdmin", "NewToken", "TenantAdmin"]


class NewToken(str):
    """The token itself (a ``str``, as ``create_token`` always returned), with its ``id``,
    ``tenant``, ``role`` and ``expires_at`` (seconds since the epoch; None: never)."""

    id: str
    tenant: str
    role: str
    expires_at: float | None

    @classmethod
    def of(cls, answer: tenants_pb2.CreateTokenResponse) -> NewToken:
        token = cls(answer.token)
        token.id, token.tenant, token.role = answer.id, answer.tenant, answer.role
        token.expires_at = answer.expires_at or None
        return token


def _token_request(
    tenant: str, role: str, name: str, expires_in: float | str | None
) -> tenants_pb2.CreateTokenRequest:
    try:
        life = 0 if expires_in is None else seconds_of(expires_in, "expires_in")
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None
    return tenants_pb2.CreateTokenRequest(
        tenant=tenant, role=role, name=name, expires_in_seconds=max(1, round(life)) if life else 0
    )


def _token(info: tenants_pb2.TokenInfo) -> TokenRecord:
    """A listed token; its digest is never sent, so ``digest`` is empty."""
    return TokenRecord(
        id=info.id, digest="", tenant=info.tenant, role=info.role, created_at=info.created_at, name=info.name,
        expires_at=info.expires_at or None, last_used_at=info.last_used_at or None, pool=info.pool,
    )  # fmt: skip


def _worker_token_request(
    pool: str, name: str, expires_in: float | str | None
) -> tenants_pb2.CreateTokenRequest:
    request = _token_request("", "", name, expires_in)
    request.worker, request.pool = True, pool
    return request


def _entry(entry: tenants_pb2.AuditEntry) -> AuditRecord:
    return AuditRecord(
        at=entry.at, token_id=entry.token_id, caller_tenant=entry.caller_tenant, caller_role=entry.caller_role,
        action=entry.action, target=entry.target, tenant=entry.tenant, details_json=entry.details_json,
    )  # fmt: skip


def _tenant(name: str, terms: Mapping[str, Any]) -> Tenant:
    try:
        return Tenant.from_dict({"name": name, **terms})
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None


def _tenants(tenants: Iterable[Tenant | Mapping[str, Any]]) -> list[Tenant]:
    checked = []
    for index, tenant in enumerate(tenants):
        if isinstance(tenant, Tenant):
            checked.append(tenant)
            continue
        try:
            checked.append(Tenant.from_dict(tenant))
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"tenants[{index}]: {exc}") from None
    return checked


def _to_proto(tenant: Tenant) -> tenants_pb2.Tenant:
    from flux.server.tenant_convert import tenant_to_proto

    return tenant_to_proto(tenant)


def _from_proto(message: tenants_pb2.Tenant) -> Tenant:
    from flux.server.tenant_convert import tenant_from_proto

    return tenant_from_proto(message)


class TenantAdmin:
    """The ``TenantService`` over a client's channel and credentials."""

    def __init__(self, call: Callable[[str, Any], Any]):
        self._call = call

    def create(self, name: str, **terms: Any) -> Tenant:
        request = tenants_pb2.CreateTenantRequest(tenant=_to_proto(_tenant(name, terms)))
        return _from_proto(self._call("CreateTenant", request).tenant)

    def list(self) -> list[Tenant]:
        return [_from_proto(t) for t in self._call("ListTenants", tenants_pb2.ListTenantsRequest()).tenants]

    def get(self, name: str) -> Tenant:
        return _from_proto(self._call("GetTenant", tenants_pb2.GetTenantRequest(name=name)).tenant)

    def set(self, name: str, **changes: Any) -> Tenant:
        """Change some terms; a value of None clears that field."""
        request = tenants_pb2.SetTenantRequest(name=name, changes_json=json.dumps(changes))
        return _from_proto(self._call("SetTenant", request).tenant)

    def delete(self, name: str) -> None:
        self._call("DeleteTenant", tenants_pb2.DeleteTenantRequest(name=name))

    def apply(self, tenants: Iterable[Tenant | Mapping[str, Any]]) -> list[Tenant]:
        """Create or replace each tenant by name, all of them or none."""
        request = tenants_pb2.ApplyTenantsRequest(tenants=[_to_proto(t) for t in _tenants(tenants)])
        return [_from_proto(t) for t in self._call("ApplyTenants", request).tenants]

    def create_token(
        self, tenant: str, role: str = "submit", name: str = "", expires_in: float | str | None = None
    ) -> NewToken:
        """A new API token for ``tenant`` (``read``, ``submit``, ``admin`` or ``cluster-admin``, up to the
        caller's own); the server keeps only its digest. ``expires_in``: seconds or a duration ("30d",
        "12h"); None: never."""
        return NewToken.of(self._call("CreateToken", _token_request(tenant, role, name, expires_in)))

    def create_worker_token(
        self, pool: str, name: str = "", expires_in: float | str | None = None
    ) -> NewToken:
        """A new worker token bound to ``pool`` (cluster admins only): its workers may join that pool
        only, and it calls nothing but the worker service."""
        return NewToken.of(self._call("CreateToken", _worker_token_request(pool, name, expires_in)))

    def list_tokens(self, tenant: str = "") -> list[TokenRecord]:
        """Tokens not revoked (``tenant``'s only, when given), newest first, without their secrets."""
        return [
            _token(t) for t in self._call("ListTokens", tenants_pb2.ListTokensRequest(tenant=tenant)).tokens
        ]

    def revoke_token(self, token_id: str) -> TokenRecord:
        """Revoke a token by its id, at once on every replica."""
        return _token(self._call("RevokeToken", tenants_pb2.RevokeTokenRequest(id=token_id)).token)

    def audit(self, since: float = 0.0, limit: int = 0) -> list[AuditRecord]:
        """Administrative changes at or after ``since`` (seconds since the epoch), newest first."""
        answer = self._call("ListAudit", tenants_pb2.ListAuditRequest(since=since, limit=limit))
        return [_entry(e) for e in answer.entries]


class AsyncTenantAdmin:
    """``TenantAdmin`` for ``flux.aio``: the same calls, awaited."""

    def __init__(self, call: Callable[[str, Any], Awaitable[Any]]):
        self._call = call

    async def create(self, name: str, **terms: Any) -> Tenant:
        request = tenants_pb2.CreateTenantRequest(tenant=_to_proto(_tenant(name, terms)))
        return _from_proto((await self._call("CreateTenant", request)).tenant)

    async def list(self) -> list[Tenant]:
        answer = await self._call("ListTenants", tenants_pb2.ListTenantsRequest())
        return [_from_proto(t) for t in answer.tenants]

    async def get(self, name: str) -> Tenant:
        return _from_proto((await self._call("GetTenant", tenants_pb2.GetTenantRequest(name=name))).tenant)

    async def set(self, name: str, **changes: Any) -> Tenant:
        request = tenants_pb2.SetTenantRequest(name=name, changes_json=json.dumps(changes))
        return _from_proto((await self._call("SetTenant", request)).tenant)

    async def delete(self, name: str) -> None:
        await self._call("DeleteTenant", tenants_pb2.DeleteTenantRequest(name=name))

    async def apply(self, tenants: Iterable[Tenant | Mapping[str, Any]]) -> list[Tenant]:
        request = tenants_pb2.ApplyTenantsRequest(tenants=[_to_proto(t) for t in _tenants(tenants)])
        return [_from_proto(t) for t in (await self._call("ApplyTenants", request)).tenants]

    async def create_token(
        self, tenant: str, role: str = "submit", name: str = "", expires_in: float | str | None = None
    ) -> NewToken:
        return NewToken.of(await self._call("CreateToken", _token_request(tenant, role, name, expires_in)))

    async def create_worker_token(
        self, pool: str, name: str = "", expires_in: float | str | None = None
    ) -> NewToken:
        return NewToken.of(await self._call("CreateToken", _worker_token_request(pool, name, expires_in)))

    async def list_tokens(self, tenant: str = "") -> list[TokenRecord]:
        answer = await self._call("ListTokens", tenants_pb2.ListTokensRequest(tenant=tenant))
        return [_token(t) for t in answer.tokens]

    async def revoke_token(self, token_id: str) -> TokenRecord:
        return _token((await self._call("RevokeToken", tenants_pb2.RevokeTokenRequest(id=token_id))).token)

    async def audit(self, since: float = 0.0, limit: int = 0) -> list[AuditRecord]:
        answer = await self._call("ListAudit", tenants_pb2.ListAuditRequest(since=since, limit=limit))
        return [_entry(e) for e in answer.entries]
