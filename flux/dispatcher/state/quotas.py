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

On PostgreSQL replicas each replica holds only what its own workers run, so the
accounts also carry what the other replicas' workers hold (``elsewhere``), as
last read from the database: by each claim, which is where quotas are enforced
exactly (``guard``, flux/store/postgres/quota.py), and on each safety tick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flux.domain.execution import Execution
from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import DEFAULT_TENANT, Tenant
from flux.matching.tenancy import ZERO, Accounts, Vector, add, admit, demand
from flux.store import Held


def governed(tenants: Iterable[Tenant]) -> bool:
    """Whether any tenant has terms the scheduler must apply."""
    return any(not t.quota.empty or t.cohort or t.weight != 1.0 for t in tenants)


class TenantUsage:
    def __init__(self, lookup: Callable[[str], Execution | None]):
        # The execution held under an id (the dispatcher's table), for its tenant and gang size.
        self.lookup = lookup
        # A gang is held by each member's worker: charged once for all of them, refunded when the
        # last member's worker gives its room back (``_members``: holds still open per gang).
        self._members: dict[str, int] = {}
        self.accounts: Accounts | None = None
        self.tenants: list[Tenant] = []
        self._by_name: dict[str, Tenant] = {}
        self._charged: dict[str, tuple[str, Vector]] = {}
        # Tenants that gave back usage since the last pass.
        self.freed: set[str] = set()
        # Replicas: what the other replicas' workers hold, per tenant (charged in ``accounts`` too).
        self.elsewhere: dict[str, Vector] = {}
        # Replicas: dispatches a claim refused for quota; the binder puts them back in line.
        self.refused: set[str] = set()
        # Pending executions whose preemption is under way: their demand is charged to their
        # tenant until they are placed (or the plan is dropped), so what their victims free is not
        # borrowed again by someone else before the last victim stops (flux/dispatcher/transitions/reclaim.py).
        self.reserved: dict[str, tuple[str, Vector]] = {}

    def configure(
        self, tenants: list[Tenant], capacity: Vector, holding: Iterable[tuple[str, str, Vector]]
    ) -> None:
        """Apply tenants' terms; ``holding`` is every reservation now (execution id, tenant, demand)."""
        self.tenants = list(tenants)
        self._by_name = {t.name: t for t in tenants}
        if not governed(tenants):
            self.accounts = None
            self._charged.clear()
            self.elsewhere = {}
            self.reserved.clear()
            return
        if self.accounts is not None:
            self.accounts.configure(tenants)
            self.accounts.capacity = capacity
            return
        self.accounts = Accounts(tenants, capacity)
        self._charged.clear()
        self.elsewhere = {}
        self.reserved.clear()
        for execution_id, tenant, amount in holding:
            self._charge(execution_id, tenant, amount)

    def admission(self, name: str) -> Tenant | None:
        """``name``'s terms for per-tenant admission (``ExecutionTable.admit``); None while the server
        has no tenant but ``default`` and ``default`` sets no limit of its own: with nobody else to lock
        out, only the server's limits apply (as before tenants)."""
        terms = self._by_name.get(name)
        if terms is not None and (terms.max_pending is not None or terms.max_pending_bytes is not None):
            return terms
        if name == DEFAULT_TENANT and self._by_name.keys() <= {DEFAULT_TENANT}:
            return None
        return terms or Tenant(name)

    def _charge(self, execution_id: str, tenant: str, amount: Vector) -> None:
        assert self.accounts is not None
        if execution_id not in self._charged:
            self._charged[execution_id] = (tenant, amount)
            self.accounts.charge(tenant, amount)

    def held(self, execution_id: str, requests: ResourceRequest) -> None:
        if self.accounts is not None:
            self.unreserve(execution_id)  # placed: what it reserved becomes what it holds
            size = self.gang_size_of(execution_id)
            if size:
                self._members[execution_id] = self._members.get(execution_id, 0) + 1
                amount = tuple(n * size for n in demand(requests))
                self._charge(execution_id, self.tenant_of(execution_id), amount)  # type: ignore[arg-type]
            else:
                self._charge(execution_id, self.tenant_of(execution_id), demand(requests))

    def tenant_of(self, execution_id: str) -> str:
        execution = self.lookup(execution_id)
        return execution.tenant if execution is not None else DEFAULT_TENANT

    def gang_size_of(self, execution_id: str) -> int:
        execution = self.lookup(execution_id)
        return execution.gang.size if execution is not None and execution.gang is not None else 0

    def reserve(self, execution_id: str, tenant: str, amount: Vector) -> None:
        if self.accounts is not None and execution_id not in self.reserved:
            self.reserved[execution_id] = (tenant, amount)
            self.accounts.charge(tenant, amount)

    def unreserve(self, execution_id: str) -> None:
        found = self.reserved.pop(execution_id, None)
        if found is not None and self.accounts is not None:
            self.accounts.refund(*found)

    def released(self, execution_id: str) -> None:
        if self.accounts is None:
            return
        left = self._members.pop(execution_id, 0) - 1
        if left > 0:  # other members of the gang still hold it
            self._members[execution_id] = left
            return
        found = self._charged.pop(execution_id, None)
        if found is not None:
            self.accounts.refund(*found)
            self.freed.add(found[0])

    # ----------------------------------------------------------------- replicas

    def observe(self, held: list[Held]) -> dict[str, Vector]:
        """Take in the cluster's usage as the database has it; returns each tenant's total."""
        total: dict[str, Vector] = {}
        others: dict[str, Vector] = {}
        for h in held:
            amount = tuple(n * h.count for n in demand(h.requests))
            total[h.tenant] = add(total.get(h.tenant, ZERO), amount)  # type: ignore[arg-type]
            if not h.mine:
                others[h.tenant] = add(others.get(h.tenant, ZERO), amount)  # type: ignore[arg-type]
        self._elsewhere(others)
        return total

    def _elsewhere(self, others: dict[str, Vector]) -> None:
        if self.accounts is None or others == self.elsewhere:
            return
        for name, amount in self.elsewhere.items():
            self.accounts.refund(name, amount)
            if others.get(name, ZERO) != amount:
                self.freed.add(name)  # what it holds elsewhere changed: its work may fit now
        for name, amount in others.items():
            self.accounts.charge(name, amount)
        self.elsewhere = others

    def guard(
        self, requests_of: Callable[[Execution], ResourceRequest]
    ) -> Callable[[list[Held], list[Execution]], set[str]]:
        """The check each claim of a replica runs inside its transaction (flux/store/postgres/quota.py)."""

        def check(held: list[Held], wanted: list[Execution]) -> set[str]:
            total = self.observe(held)
            refused = admit(
                self.tenants,
                total,
                ((e.execution_id, e.tenant, _whole(e, demand(requests_of(e)))) for e in wanted),
            )
            self.refused |= refused
            return refused

        return check


def _whole(execution: Execution, amount: Vector) -> Vector:
    """What an execution holds against its quota: a gang's members all together."""
    size = execution.gang.size if execution.gang is not None else 1
    return amount if size == 1 else tuple(n * size for n in amount)  # type: ignore[return-value]
