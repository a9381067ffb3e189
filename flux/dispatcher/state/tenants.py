"""Tenants and their API tokens, as the store keeps them, and who a token speaks for.

A token belongs to one tenant with one role, each allowed what the one before it is:
``read`` (see the tenant's executions), ``submit`` (also run and cancel them),
``admin`` (also register the tenant's workflows and mint and revoke its tokens, up
to its own role: its own tenant only, never a quota) and ``cluster-admin``
(everything, every tenant's: tenants, quotas, pools, the fleet). The server's own
API token (``--api-token``, ``./.flux/api.token``) is a cluster-admin token of
tenant ``default``, so a store and a token directory from before tenants keep
working: everything in them is tenant ``default``.

Tokens are stored by their SHA-256 digest only: a copy of the database does not
hold a usable token. A token is shown once, when it is created. Each replica
remembers the tokens it has resolved for ``REMEMBERED_FOR`` seconds, so a token
created through another replica works everywhere at once, and one whose tenant
was deleted stops working within that time everywhere (at once on the replica
that deleted it).

The ``default`` tenant always exists (stored only once it is given terms) and
cannot be deleted: it is where untenanted work lives.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flux.auth import new_token
from flux.domain.execution import Execution
from flux.domain.tenant import DEFAULT_TENANT, Tenant, check_name
from flux.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from flux.store.base import Store

# Ordered: each role may do what the ones before it may.
ROLES = ("read", "submit", "admin", "cluster-admin")
RANK = {role: rank for rank, role in enumerate(ROLES)}
ROLE_FORM = "one of read, submit, admin, cluster-admin"
# How long a resolved token is trusted without asking the store again (see the module docstring).
REMEMBERED_FOR = 30.0
# Resolved tokens kept at most; the oldest is forgotten first.
REMEMBERED = 4096


def check_role(role: object) -> str:
    if role not in ROLES:
        raise InvalidArgument(f"role {role!r} is invalid; use {ROLE_FORM}")
    return str(role)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a client call speaks for."""

    tenant: str
    role: str
    # The stored token's id (flux token list), "" for the server's own token: who, in the audit trail.
    token_id: str = ""

    @property
    def cluster_admin(self) -> bool:
        """Administers the cluster: every tenant, quotas, pools, the fleet."""
        return self.role == "cluster-admin"

    @property
    def admin(self) -> bool:
        """Administers its own tenant at least (a cluster admin is one too)."""
        return RANK[self.role] >= RANK["admin"]

    def may_grant(self, role: str) -> bool:
        """Whether this caller may mint a token with ``role``: up to its own, never above."""
        return RANK[role] <= RANK[self.role]

    def sees_tenant(self, tenant: str) -> bool:
        return self.cluster_admin or tenant == self.tenant

    def sees(self, execution: Execution) -> bool:
        return self.sees_tenant(execution.tenant)

    @property
    def scope(self) -> str:
        """The tenant a listing is limited to; "" (every tenant) for a cluster admin."""
        return "" if self.cluster_admin else self.tenant


# The server's own API token, and every call when authentication is off (--insecure).
OPERATOR = Caller(DEFAULT_TENANT, "cluster-admin")


class TenantDirectory:
    def __init__(
        self,
        store: Store,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[list[Tenant]], None] | None = None,
    ):
        self.store = store
        self.clock = clock
        # Told every tenant's terms after each change (the dispatcher applies them to placement).
        self.on_change = on_change
        self._resolved: OrderedDict[str, tuple[float, Caller | None]] = OrderedDict()

    # ----------------------------------------------------------------- tenants

    async def list(self) -> list[Tenant]:
        stored = {
            name: Tenant.from_dict(json.loads(spec), name) for name, spec in await self.store.list_tenants()
        }
        stored.setdefault(DEFAULT_TENANT, Tenant(DEFAULT_TENANT))
        return sorted(stored.values(), key=lambda t: t.name)

    async def find(self, name: str) -> Tenant | None:
        check_name(name)
        found = next((t for t in await self.list() if t.name == name), None)
        return found

    async def get(self, name: str) -> Tenant:
        found = await self.find(name)
        if found is None:
            raise NotFound(f"tenant {name!r} does not exist; create it with: flux tenant create {name}")
        return found

    async def create(self, tenant: Tenant) -> Tenant:
        if await self.find(tenant.name) is not None:
            raise AlreadyExists(f"tenant {tenant.name!r} already exists; change it with: flux tenant set")
        await self.apply([tenant])
        return tenant

    async def update(self, name: str, changes: Mapping[str, Any]) -> Tenant:
        updated = (await self.get(name)).updated(changes)
        await self.apply([updated])
        return updated

    async def apply(self, tenants: list[Tenant]) -> list[Tenant]:
        """Create or replace each tenant by name, all of them or none."""
        names = [t.name for t in tenants]
        if len(set(names)) != len(names):
            repeated = next(n for n in names if names.count(n) > 1)
            raise InvalidArgument(f"tenant {repeated!r} is given more than once; give each tenant once")
        await self.store.save_tenants([(t.name, json.dumps(t.to_dict())) for t in tenants])
        await self._changed()
        return tenants

    async def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(await self.list())

    async def delete(self, name: str) -> None:
        check_name(name)
        if name == DEFAULT_TENANT:
            raise FailedPrecondition(f"tenant {DEFAULT_TENANT!r} cannot be deleted: it holds untenanted work")
        if not await self.store.delete_tenant(name):
            raise NotFound(f"tenant {name!r} does not exist")
        await self._changed()
        self._resolved = OrderedDict(
            (d, entry) for d, entry in self._resolved.items() if entry[1] is None or entry[1].tenant != name
        )

    # ----------------------------------------------------------------- tokens

    async def create_token(self, tenant: str, role: str) -> str:
        """A new API token for ``tenant`` with ``role``; only its digest is stored."""
        check_role(role)
        await self.get(tenant)
        token = new_token()
        await self.store.save_token(digest(token), tenant, role)
        return token

    async def caller(self, token: str) -> Caller | None:
        """Who ``token`` speaks for, or None when it is no tenant's token."""
        key = digest(token)
        now = self.clock()
        remembered = self._resolved.get(key)
        if remembered is not None and remembered[0] > now:
            return remembered[1]
        found = await self.store.find_token(key)
        caller = Caller(*found) if found is not None else None
        self._resolved[key] = (now + REMEMBERED_FOR, caller)
        self._resolved.move_to_end(key)
        while len(self._resolved) > REMEMBERED:
            self._resolved.popitem(last=False)
        return caller
