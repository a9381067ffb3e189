"""Tenants and their tokens from Python: ``client.tenants`` (``flux.client`` and ``flux.aio``).

Every call needs an admin API token (the server's own is one). Tenants come
back as ``flux.domain.tenant.Tenant``; terms go in as the fields of a tenants
file (DESIGN §9, §10: ``cpu``, ``memory``, ``gpu``, ``gpu_memory``, ``executions``,
``cohort``, ``borrowing_limit``, ``lending_limit``, ``weight``, ``max_pending``,
``max_pending_bytes``), checked here first so a bad
value is refused naming its field before anything is sent::

    client.tenants.create("ml", gpu=4, cohort="research", borrowing_limit={"gpu": 2})
    token = client.tenants.create_token("ml", role="submit")
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from flux.domain.tenant import Tenant
from flux.errors import InvalidArgument
from flux.v1 import tenants_pb2

__all__ = ["AsyncTenantAdmin", "TenantAdmin"]


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

    def create_token(self, tenant: str, role: str = "submit") -> str:
        """A new API token for ``tenant`` (``submit``, ``read`` or ``admin``); the server keeps only its digest."""
        return str(self._call("CreateToken", tenants_pb2.CreateTokenRequest(tenant=tenant, role=role)).token)


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

    async def create_token(self, tenant: str, role: str = "submit") -> str:
        answer = await self._call("CreateToken", tenants_pb2.CreateTokenRequest(tenant=tenant, role=role))
        return str(answer.token)
