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
hold a usable token. A token is shown once, when it is created. Each has a stored
id (random, not derived from the secret: ``flux token list``, ``flux token revoke
ID``), an optional name and expiry, and its last use, written at most once a
minute per token (``TOUCH_EVERY``) so that using a token stays a read.

Revocation and expiry take effect within a second on every replica. Expiry is
checked against the wall clock on every use, remembered or not. A resolved token
is remembered for ``REMEMBERED_FOR`` (half a second) and no longer: replicas share
only the database, so a revocation through another replica is seen on the next
read, at most that long after; on the replica that revoked it, at once. A
short memory rather than a NOTIFY: a notice lost while a replica's LISTEN
connection reconnects would leave a revoked token working, a short memory
cannot, and one indexed read per token per half second is cheap.

A tenant's records carry its name. Deleting a tenant moves, in the same
transaction, its executions and workflows to a tombstone, ``NAME~ID`` with a
random id minted for that deletion (an internal id of that tenant's life): no
tenant can have that name (``~`` is not allowed in one), so a tenant created
again under NAME, and its tokens, see none of the old one's work, while a
cluster admin still does. The old workflows' names stay the tombstone's. A
tenant with unfinished executions cannot be deleted (FAILED_PRECONDITION, naming
how many): cancel them or let them finish first, so the dispatcher never holds
live work of a tenant that is gone.

The ``default`` tenant always exists (stored only once it is given terms) and
cannot be deleted: it is where untenanted work lives.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flux.domain.execution import Execution
from flux.domain.tenant import DEFAULT_TENANT, Tenant, check_name
from flux.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from flux.matching.pools import validate_pool_name
from flux.security import new_token
from flux.store import Store, TokenRecord

log = logging.getLogger("flux.tenants")

# Ordered: each role may do what the ones before it may.
ROLES = ("read", "submit", "admin", "cluster-admin")
# A worker token (flux token create --worker --pool P) ranks below every API role: it calls
# the worker service only (flux.server.callers), and registers workers of its pool only.
WORKER_ROLE = "worker"
RANK = {WORKER_ROLE: -1, **{role: rank for rank, role in enumerate(ROLES)}}
ROLE_FORM = "one of read, submit, admin, cluster-admin"
# How long a resolved token is trusted without asking the store again (see the module docstring):
# a revocation through another replica takes effect within this.
REMEMBERED_FOR = 0.5
# A token's last use is written at most this often (seconds).
TOUCH_EVERY = 60.0
# The longest token name, and the longest life a token may be given (ten years, in seconds).
NAME_MAX = 63
LONGEST_LIFE = 10 * 365 * 86400
# Why a token is refused; the same words whether it never existed or its tenant was deleted.
INVALID = "invalid api token"
# Resolved tokens kept at most; the oldest is forgotten first.
REMEMBERED = 4096


def check_role(role: object) -> str:
    if role not in ROLES:
        raise InvalidArgument(f"role {role!r} is invalid; use {ROLE_FORM}")
    return str(role)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token_id() -> str:
    """Short and random: it names a token in listings and the audit trail, and reveals nothing of it."""
    return secrets.token_hex(6)


def check_token_name(name: object) -> str:
    if not isinstance(name, str) or len(name) > NAME_MAX or not name.isprintable():
        raise InvalidArgument(f"token name {name!r} is invalid; use up to {NAME_MAX} printable characters")
    return name


def check_expires_in(seconds: float | None) -> float | None:
    """None or 0: never expires."""
    if not seconds:
        return None
    if not math.isfinite(seconds) or not 0 < seconds <= LONGEST_LIFE:
        raise InvalidArgument(
            f"expires_in {seconds!r} is invalid; use seconds > 0 and at most {LONGEST_LIFE} (ten years), "
            "or 0 for never"
        )
    return float(seconds)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a client call speaks for."""

    tenant: str
    role: str
    # The stored token's id (flux token list), "" for the server's own token: who, in the audit trail.
    token_id: str = ""
    # A worker token's pool: the only pool its workers may join ("" for every other token).
    pool: str = ""

    @property
    def worker(self) -> bool:
        return self.role == WORKER_ROLE

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
        unfinished: Callable[[str], Awaitable[int]] | None = None,
        wall: Callable[[], float] = time.time,
    ):
        self.store = store
        self.clock = clock
        # Expiry and last use are moments other replicas and people read: the wall clock's.
        self.wall = wall
        # Told every tenant's terms after each change (the dispatcher applies them to placement).
        self.on_change = on_change
        # How many unfinished executions a tenant has (the dispatcher's and the store's).
        self.unfinished = unfinished
        self._resolved: OrderedDict[str, tuple[float, TokenRecord | None]] = OrderedDict()

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

    async def delete(self, name: str) -> str:
        """Delete a tenant and its tokens; the tombstone its executions and workflows now carry."""
        check_name(name)
        if name == DEFAULT_TENANT:
            raise FailedPrecondition(f"tenant {DEFAULT_TENANT!r} cannot be deleted: it holds untenanted work")
        await self.get(name)
        busy = await self.unfinished(name) if self.unfinished is not None else 0
        if busy:
            raise FailedPrecondition(
                f"tenant {name!r} has {busy} unfinished execution{'s' if busy != 1 else ''}; cancel them "
                f"(flux execution cancel ID) or let them finish, then delete it"
            )
        tombstone = f"{name}~{secrets.token_hex(4)}"
        if not await self.store.delete_tenant(name, tombstone):
            raise NotFound(f"tenant {name!r} does not exist")
        await self._changed()
        self._forget(lambda t: t.tenant == name)
        return tombstone

    def _forget(self, which: Callable[[TokenRecord], bool]) -> None:
        self._resolved = OrderedDict(
            (d, entry) for d, entry in self._resolved.items() if entry[1] is None or not which(entry[1])
        )

    # ----------------------------------------------------------------- tokens

    async def create_token(
        self, tenant: str, role: str, name: str = "", expires_in: float | None = None
    ) -> tuple[str, TokenRecord]:
        """A new API token for ``tenant`` with ``role``, and its record; only its digest is stored."""
        check_role(role)
        check_token_name(name)
        life = check_expires_in(expires_in)
        await self.get(tenant)
        token, now = new_token(), self.wall()
        record = TokenRecord(
            id=new_token_id(), digest=digest(token), tenant=tenant, role=role, created_at=now, name=name,
            expires_at=now + life if life else None,
        )  # fmt: skip
        await self.store.save_token(record)
        return token, record

    async def create_worker_token(
        self, pool: str, name: str = "", expires_in: float | None = None
    ) -> tuple[str, TokenRecord]:
        """A new worker token bound to ``pool``: a worker presenting it may join that pool only.

        It belongs to no tenant; revoking it refuses its workers' next registration and calls.
        """
        try:
            validate_pool_name(pool, "pool")
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        check_token_name(name)
        life = check_expires_in(expires_in)
        token, now = new_token(), self.wall()
        record = TokenRecord(
            id=new_token_id(), digest=digest(token), tenant="", role=WORKER_ROLE, created_at=now,
            name=name, expires_at=now + life if life else None, pool=pool,
        )  # fmt: skip
        await self.store.save_token(record)
        return token, record

    async def list_tokens(self, tenant: str = "") -> list[TokenRecord]:
        return await self.store.list_tokens(tenant)

    async def revoke_token(self, token_id: str, tenant: str = "") -> TokenRecord:
        """Revoke a token (only ``tenant``'s, when given: another's answers as a missing one)."""
        revoked = await self.store.revoke_token(token_id, tenant) if token_id else None
        if revoked is None:
            raise NotFound(
                f"token {token_id!r} does not exist; flux token list shows the tokens and their ids"
            )
        self._forget(lambda t: t.id == token_id)
        return revoked

    async def caller(self, token: str) -> Caller | None:
        """Who ``token`` speaks for, or None when it is no tenant's token or no longer valid."""
        found = await self.lookup(token)
        return found if isinstance(found, Caller) else None

    async def lookup(self, token: str) -> Caller | str:
        """Who ``token`` speaks for, or why it is refused (never the token)."""
        record = await self._record(token)
        if record is None:
            return INVALID
        now = self.wall()
        if record.revoked:
            return "api token revoked; ask an admin for a new one (flux token create)"
        if record.expires_at is not None and record.expires_at <= now:
            return f"token expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(record.expires_at))}"
        if record.last_used_at is None or now - record.last_used_at >= TOUCH_EVERY:
            await self._touch(token, record, now)
        return Caller(record.tenant, record.role, record.id, record.pool)

    async def _record(self, token: str) -> TokenRecord | None:
        key = digest(token)
        now = self.clock()
        remembered = self._resolved.get(key)
        if remembered is not None and remembered[0] > now:
            return remembered[1]
        found = await self.store.find_token(key)
        self._resolved[key] = (now + REMEMBERED_FOR, found)
        self._resolved.move_to_end(key)
        while len(self._resolved) > REMEMBERED:
            self._resolved.popitem(last=False)
        return found

    async def _touch(self, token: str, record: TokenRecord, now: float) -> None:
        key = digest(token)
        touched = dataclasses.replace(record, last_used_at=now)
        if key in self._resolved:  # so this replica writes it once a minute, not once per read
            self._resolved[key] = (self._resolved[key][0], touched)
        try:
            await self.store.touch_token(record.id, now)
        except Exception as exc:  # a missed "last used" must not refuse the call it describes
            log.warning("could not record the use of token %s: %s", record.id, exc)
