"""The tenants' named limits (``flux limit create openai --concurrency 10``): kept in the store,
read from memory at every admission, and each change handed to flow control at once.

The book holds every tenant's limits in memory (a few per tenant), loaded at start and written
through on each change; ``on_change`` (``FlowUsage.limit_changed``) applies a change to the
work waiting on it. On PostgreSQL replicas a change made through another replica arrives as a
notice (``LimitsChanged``), and ``reload`` applies what differs the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from flux.domain.limits import validate_limit_name
from flux.domain.named_limits import NamedLimit
from flux.errors import AlreadyExists, InvalidArgument, NotFound

if TYPE_CHECKING:
    from flux.store import Store


class LimitBook:
    def __init__(self, store: Store, on_change: Callable[[str, str], None] | None = None):
        self.store = store
        self.on_change = on_change
        self._limits: dict[tuple[str, str], NamedLimit] = {}

    async def load(self) -> None:
        self._limits = {
            (tenant, name): NamedLimit.from_dict(json.loads(spec), name)
            for tenant, name, spec in await self.store.list_limits()
        }

    async def reload(self) -> None:
        """Read the limits again (another replica changed some): each one that differs applies now."""
        before = self._limits
        await self.load()
        for key in sorted(before.keys() | self._limits.keys()):
            if before.get(key) != self._limits.get(key):
                self._changed(*key)

    def find(self, tenant: str, name: str) -> NamedLimit | None:
        """From memory: called at every admission of a workflow that names limits."""
        return self._limits.get((tenant, name))

    def list(self, tenant: str) -> list[NamedLimit]:
        return [limit for (t, _), limit in sorted(self._limits.items()) if t == tenant]

    def get(self, tenant: str, name: str) -> NamedLimit:
        validate_limit_name(name)
        found = self.find(tenant, name)
        if found is None:
            raise NotFound(
                f"limit {name!r} does not exist in tenant {tenant!r}; create it with: flux limit create {name}"
            )
        return found

    async def create(self, tenant: str, limit: NamedLimit) -> NamedLimit:
        if self.find(tenant, limit.name) is not None:
            raise AlreadyExists(
                f"limit {limit.name!r} already exists in tenant {tenant!r}; change it with: flux limit set"
            )
        await self.apply(tenant, [limit])
        return limit

    async def update(self, tenant: str, name: str, changes: Mapping[str, Any]) -> NamedLimit:
        updated = self.get(tenant, name).updated(changes)
        await self.apply(tenant, [updated])
        return updated

    async def apply(self, tenant: str, limits: list[NamedLimit]) -> list[NamedLimit]:
        """Create or replace each limit by name, all of them or none."""
        names = [limit.name for limit in limits]
        if len(set(names)) != len(names):
            repeated = next(n for n in names if names.count(n) > 1)
            raise InvalidArgument(f"limit {repeated!r} is given more than once; give each limit once")
        await self.store.save_limits([(tenant, lim.name, json.dumps(lim.to_dict())) for lim in limits])
        for limit in limits:
            self._limits[(tenant, limit.name)] = limit
            self._changed(tenant, limit.name)
        return limits

    async def delete(self, tenant: str, name: str) -> None:
        self.get(tenant, name)
        await self.store.delete_limit(tenant, name)
        self._limits.pop((tenant, name), None)
        self._changed(tenant, name)

    def _changed(self, tenant: str, name: str) -> None:
        if self.on_change is not None:
            self.on_change(tenant, name)
