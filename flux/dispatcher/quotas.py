"""What each tenant holds, kept for the scheduler's quota and fair-share checks (``Accounts``).

Workers' entries report every reservation they take and give back (``held`` and
``released``): an execution is charged to its tenant when it is placed (or found
held on recovery) and refunded when its worker releases it, whatever ended it
(completion, cancel, requeue, a lost worker). Each execution is charged once.

Until some tenant has terms (a quota, a cohort or a weight other than 1) there
are no accounts at all: ``held`` and ``released`` return at once and the
scheduler runs as it always did, so a fleet with only the ``default`` tenant
pays nothing for tenancy.

A tenant freeing usage can unblock work anywhere in the fleet (the quota was
the limit, not the worker), so ``freed`` says which tenants did; the dispatcher
then runs a pass over the whole queue and fleet instead of one over the worker
that freed room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import Tenant
from flux.matching.tenancy import Accounts, Vector, demand


def governed(tenants: Iterable[Tenant]) -> bool:
    """Whether any tenant has terms the scheduler must apply."""
    return any(not t.quota.empty or t.cohort or t.weight != 1.0 for t in tenants)


class TenantUsage:
    def __init__(self, tenant_of: Callable[[str], str]):
        self.tenant_of = tenant_of
        self.accounts: Accounts | None = None
        self._charged: dict[str, tuple[str, Vector]] = {}
        # Tenants that gave back usage since the last pass.
        self.freed: set[str] = set()

    def configure(
        self, tenants: list[Tenant], capacity: Vector, holding: Iterable[tuple[str, str, Vector]]
    ) -> None:
        """Apply tenants' terms; ``holding`` is every reservation now (execution id, tenant, demand)."""
        if not governed(tenants):
            self.accounts = None
            self._charged.clear()
            return
        if self.accounts is not None:
            self.accounts.configure(tenants)
            self.accounts.capacity = capacity
            return
        self.accounts = Accounts(tenants, capacity)
        self._charged.clear()
        for execution_id, tenant, amount in holding:
            self._charge(execution_id, tenant, amount)

    def _charge(self, execution_id: str, tenant: str, amount: Vector) -> None:
        assert self.accounts is not None
        if execution_id not in self._charged:
            self._charged[execution_id] = (tenant, amount)
            self.accounts.charge(tenant, amount)

    def held(self, execution_id: str, requests: ResourceRequest) -> None:
        if self.accounts is not None:
            self._charge(execution_id, self.tenant_of(execution_id), demand(requests))

    def released(self, execution_id: str) -> None:
        if self.accounts is None:
            return
        found = self._charged.pop(execution_id, None)
        if found is not None:
            self.accounts.refund(*found)
            self.freed.add(found[0])
