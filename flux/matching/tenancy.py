"""Tenants' quotas, cohort borrowing and DRF fair share, as the scheduler checks them.

``Accounts`` is kept by the dispatcher across passes: each tenant's terms
(quota, cohort, limits, weight) and what its scheduled and running executions
hold (``charge`` at dispatch, ``refund`` when they end), plus per cohort the
pool its members lend and how much of it is drawn. A pass reads it through a
``Ledger``, which adds what the pass itself places, so a burst of placements
in one pass is checked against everything placed before it: quota is decided
in the same pure decision as placement and can never be exceeded by a burst.

Quota (Kubernetes Kueue's cohort model, flat): for each resource a tenant has
a nominal quota ``n`` on, with ``lendable = min(n, lending_limit)`` and
``guaranteed = n - lendable``,

- outside a cohort, usage stays within ``n``;
- in a cohort, usage stays within ``n + borrowing_limit`` (when set), and
  what members use beyond their guaranteed part is drawn from the cohort's
  pool (the sum of the members' lendable amounts) and never exceeds it. So
  a member uses its own quota first, then what the others leave unused.

A resource without a quota is unlimited for that tenant and takes no part in
its cohort. A request that does not ask for a resource is not checked on it,
except ``executions``: every execution holds one of its tenant's execution
slots, as it holds one of its worker's (``capacity``), whatever it requests.
So work that requests nothing still counts: against an ``executions`` quota,
in the cohort's pool of slots, and in the fair share (the fleet's slots are
that resource's capacity).

Fair share is instant, not decayed (as Kueue's, KEP-1714): a tenant's share
is its dominant resource share above its nominal quota, ``max over resources
of (usage above nominal) / fleet capacity``, divided by its weight. Among
tenants with work to place, the one whose share is lowest goes next (DRF's
progressive filling); ties by priority, then submission. Only what a tenant holds
now counts, so a team that was idle yesterday gets no credit and one that ran
all night no debt: the fleet is shared by what each holds, which is what an
operator can see and reason about.

Cost: ``fits``, ``charge`` and ``share`` are O(resources) dict reads; a
``Ledger`` starts empty, so a pass never pays for tenants it does not touch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import COUNTED, DEFAULT_TENANT, RESOURCES, Tenant, describe_amount
from flux.domain.worker import WorkerResources

# cpu cores, memory bytes, GPUs, VRAM bytes, executions (RESOURCES' order)
Vector = tuple[int, int, int, int, int]
ZERO: Vector = (0, 0, 0, 0, 0)
EXECUTIONS = RESOURCES.index("executions")
_R = range(len(RESOURCES))


def demand(requests: ResourceRequest) -> Vector:
    """What an execution holds against its tenant's quota: its requests (VRAM per GPU times GPUs)
    and one execution slot, which even an execution that requests nothing holds."""
    return (requests.cpu, requests.memory, requests.gpu, requests.gpu * requests.gpu_memory, 1)


def capacity_of(resources: Iterable[WorkerResources], slots: int = 0) -> Vector:
    """A fleet's totals, the denominators of the fair share; ``slots``: its workers' capacities summed
    (0: executions take no part in the share)."""
    cpu = memory = gpu = vram = 0
    for r in resources:
        cpu += r.cpu_total
        memory += r.memory_total
        gpu += len(r.gpus)
        vram += sum(g.memory_total for g in r.gpus)
    return (cpu, memory, gpu, vram, slots)


def add(a: Vector, b: Vector) -> Vector:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4])


def sub(a: Vector, b: Vector) -> Vector:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4])


class Terms:
    """A tenant's terms, precomputed per resource for the hot path."""

    __slots__ = (
        "tenant",
        "name",
        "nominal",
        "guaranteed",
        "lendable",
        "cap",
        "cohort",
        "weight",
        "limited",
        "quoted",
    )

    def __init__(self, tenant: Tenant):
        self.tenant = tenant
        self.name = tenant.name
        self.nominal = tenant.quota.as_tuple()
        lend = tenant.lending_limit.as_tuple()
        borrow = tenant.borrowing_limit.as_tuple()
        self.lendable = tuple(
            None if n is None else (n if lend[i] is None else min(n, lend[i]))
            for i, n in enumerate(self.nominal)
        )
        self.guaranteed = tuple(
            None if n is None else n - lendable
            for n, lendable in zip(self.nominal, self.lendable, strict=True)
        )
        self.cohort = tenant.cohort
        # Highest usage allowed on each resource; None = only the cohort's pool bounds it.
        self.cap = tuple(
            None if n is None else (n if not self.cohort else (None if borrow[i] is None else n + borrow[i]))
            for i, n in enumerate(self.nominal)
        )
        self.weight = tenant.weight
        # The resources it has a quota on: the only ones checked or drawn from its cohort.
        self.quoted = tuple(i for i, n in enumerate(self.nominal) if n is not None)
        self.limited = bool(self.quoted)


@dataclass(frozen=True, slots=True)
class QuotaBlock:
    """Why a tenant's next execution does not fit its quota now (never permanent: usage falls)."""

    tenant: str
    resource: str
    used: int
    nominal: int
    wanted: int
    # How far above nominal it may go (None: as far as the cohort has free), and the cohort.
    borrowing_limit: int | None
    cohort: str
    # True when the tenant's own cap allows it but the cohort has no more to lend.
    cohort_exhausted: bool

    def describe(self) -> str:
        """``tenant ml at its gpu quota 4/4, borrowing 0 of 2 in cohort research``."""
        r = self.resource
        used = _amount(r, self.used)
        nominal = _amount(r, self.nominal)
        if self.used >= self.nominal:
            text = f"tenant {self.tenant} at its {r} quota {used}/{nominal}"
        else:
            text = f"tenant {self.tenant} using {used}/{nominal} of its {r} quota"
        if not self.cohort:
            return text if self.used >= self.nominal else f"{text}, needs {describe_amount(r, self.wanted)}"
        borrowed = _amount(r, max(0, self.used - self.nominal))
        limit = "no limit" if self.borrowing_limit is None else _amount(r, self.borrowing_limit)
        text = f"{text}, borrowing {borrowed} of {limit} in cohort {self.cohort}"
        if self.cohort_exhausted:
            text += f" (the cohort has no {r} left to lend)"
        return text


def _amount(resource: str, value: int) -> str:
    return str(value) if resource in COUNTED else describe_amount(resource, value).replace(" ", "")


class Accounts:
    """Tenants' terms and usage across passes, kept up to date by the dispatcher."""

    def __init__(self, tenants: Iterable[Tenant] = (), capacity: Vector = ZERO):
        self._capacity = capacity
        self.usage: dict[str, Vector] = {}
        # Each using tenant's share now: the scheduler's lower bound for a tenant it has not opened.
        self.shares: dict[str, float] = {}
        self.terms: dict[str, Terms] = {}
        self.members: dict[str, list[Terms]] = {}
        self.pool: dict[str, list[int]] = {}
        self.drawn: dict[str, list[int]] = {}
        self.scales: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {}
        self.unlimited_scale: tuple[tuple[int, ...], tuple[float, ...]] = (ZERO, (0.0,) * len(ZERO))
        self.configure(tenants)

    @property
    def capacity(self) -> Vector:
        """The fleet's totals (``capacity_of``): the denominators of every share."""
        return self._capacity

    @capacity.setter
    def capacity(self, capacity: Vector) -> None:
        if capacity != self._capacity:
            self._capacity = capacity
            self._reshare()

    def _reshare(self) -> None:
        capacity = self._capacity
        # Per tenant, what its share is measured from: (nominal or 0, capacity x weight) per resource.
        self.scales = {
            name: (tuple(n or 0 for n in t.nominal), tuple(c * t.weight for c in capacity))
            for name, t in self.terms.items()
        }
        self.unlimited_scale = (ZERO, tuple(float(c) for c in capacity))
        self.shares = {name: self.share(name) for name in self.usage}

    def configure(self, tenants: Iterable[Tenant]) -> None:
        """Replace every tenant's terms (usage is kept: it is what runs, whatever the terms say)."""
        self.terms = {t.name: Terms(t) for t in tenants}
        self.members = {}
        for terms in self.terms.values():
            if terms.cohort:
                self.members.setdefault(terms.cohort, []).append(terms)
        self.pool = {}
        self.drawn = {}
        for cohort, members in self.members.items():
            self.pool[cohort] = [sum(m.lendable[i] or 0 for m in members) for i in _R]
            self.drawn[cohort] = [
                sum(_drawn(m, self.usage.get(m.name, ZERO)[i], i) for m in members) for i in _R
            ]
        self._reshare()

    def copy(self) -> Accounts:
        """The same terms and usage, to change without touching these."""
        copied = Accounts((t.tenant for t in self.terms.values()), self._capacity)
        for name, used in self.usage.items():
            copied.charge(name, used)
        return copied

    def tenant(self, name: str) -> Tenant:
        terms = self.terms.get(name)
        return terms.tenant if terms is not None else Tenant(name or DEFAULT_TENANT)

    def used(self, name: str) -> Vector:
        return self.usage.get(name, ZERO)

    def charge(self, name: str, amount: Vector) -> None:
        self._move(name, amount, 1)

    def refund(self, name: str, amount: Vector) -> None:
        self._move(name, amount, -1)

    def _move(self, name: str, amount: Vector, sign: int) -> None:
        before = self.usage.get(name, ZERO)
        after = add(before, amount) if sign > 0 else sub(before, amount)
        if after == ZERO:
            self.usage.pop(name, None)
            self.shares.pop(name, None)
        else:
            self.usage[name] = after
            self.shares[name] = self.share(name, after)
        terms = self.terms.get(name)
        if terms is not None and terms.cohort:
            drawn = self.drawn[terms.cohort]
            for i in _R:
                drawn[i] += _drawn(terms, after[i], i) - _drawn(terms, before[i], i)

    def share(self, name: str, usage: Vector | None = None) -> float:
        """Weighted dominant share above nominal quota (see the module's docstring)."""
        u = self.usage.get(name, ZERO) if usage is None else usage
        return _share(u, self.scales.get(name, self.unlimited_scale))

    def cohort_of(self, name: str) -> str:
        terms = self.terms.get(name)
        return terms.cohort if terms is not None else ""


def _share(used: Sequence[int], scale: tuple[tuple[int, ...], tuple[float, ...]]) -> float:
    """max over resources of (used - nominal) / (capacity x weight): the one formula of a share."""
    floor, denominator = scale
    best = 0.0
    for i in _R:
        above = used[i] - floor[i]
        if above > 0 and denominator[i] > 0:
            value = above / denominator[i]
            if value > best:
                best = value
    return best


def _drawn(terms: Terms, used: int, i: int) -> int:
    """What a member at ``used`` draws from its cohort's pool on resource ``i``."""
    guaranteed = terms.guaranteed[i]
    return 0 if guaranteed is None else max(0, used - guaranteed)


class Ledger:
    """One pass's reading of ``Accounts``: the base plus what this pass has placed.

    The hot path of every placement with tenants (``blocked``, ``charge``,
    ``share_with``), so it works on a mutable copy of each touched tenant's usage.
    """

    __slots__ = ("accounts", "now", "drawn")

    def __init__(self, accounts: Accounts):
        self.accounts = accounts
        # Usage of the tenants this pass placed for (base included); others read the base.
        self.now: dict[str, list[int]] = {}
        # What this pass added to each cohort's drawn amounts.
        self.drawn: dict[str, list[int]] = {}

    def blocked(self, name: str, amount: Vector) -> QuotaBlock | None:
        """Why ``amount`` more does not fit ``name``'s quota now, or None when it fits."""
        terms = self.accounts.terms.get(name)
        if terms is None or not terms.limited:
            return None
        used = self.now.get(name) or self.accounts.usage.get(name, ZERO)
        cohort = terms.cohort
        for i in terms.quoted:
            wanted = amount[i]
            if not wanted:
                continue
            before = used[i]
            after = before + wanted
            cap = terms.cap[i]
            if cap is not None and after > cap:
                return self._block(terms, i, before, wanted, False)
            if cohort:
                guaranteed = terms.guaranteed[i]
                increase = max(0, after - guaranteed) - max(0, before - guaranteed)
                if increase:
                    extra = self.drawn.get(cohort)
                    drawn = self.accounts.drawn[cohort][i] + (extra[i] if extra is not None else 0)
                    if drawn + increase > self.accounts.pool[cohort][i]:
                        return self._block(terms, i, before, wanted, True)
        return None

    def fits(self, name: str, amount: Vector) -> bool:
        return self.blocked(name, amount) is None

    def charge(self, name: str, amount: Vector) -> float:
        """Count ``amount`` more for ``name`` in this pass; return its share now."""
        now = self.now.get(name)
        if now is None:
            now = self.now[name] = list(self.accounts.usage.get(name, ZERO))
        terms = self.accounts.terms.get(name)
        if terms is not None and terms.cohort:
            drawn = self.drawn.get(terms.cohort)
            if drawn is None:
                drawn = self.drawn[terms.cohort] = [0, 0, 0, 0, 0]
            for i in terms.quoted:
                if amount[i]:
                    guaranteed = terms.guaranteed[i]
                    drawn[i] += max(0, now[i] + amount[i] - guaranteed) - max(0, now[i] - guaranteed)
        now[0] += amount[0]
        now[1] += amount[1]
        now[2] += amount[2]
        now[3] += amount[3]
        now[4] += amount[4]
        accounts = self.accounts
        return _share(now, accounts.scales.get(name, accounts.unlimited_scale))

    def share(self, name: str) -> float:
        """``name``'s share now, with what this pass placed for it."""
        now = self.now.get(name)
        if now is None:
            return self.accounts.shares.get(name, 0.0)
        accounts = self.accounts
        return _share(now, accounts.scales.get(name, accounts.unlimited_scale))

    def share_with(self, name: str, amount: Vector) -> float:
        """``name``'s share once ``amount`` more is placed for it."""
        used = self.now.get(name) or self.accounts.usage.get(name, ZERO)
        accounts = self.accounts
        return _share(add(used, amount), accounts.scales.get(name, accounts.unlimited_scale))

    def _block(self, terms: Terms, i: int, used: int, wanted: int, exhausted: bool) -> QuotaBlock:
        nominal = terms.nominal[i]
        assert nominal is not None
        cap = terms.cap[i]
        return QuotaBlock(
            terms.name,
            RESOURCES[i],
            used,
            nominal,
            wanted,
            None if cap is None else cap - nominal,
            terms.cohort,
            exhausted,
        )


def admit(
    tenants: Iterable[Tenant], held: dict[str, Vector], wanted: Iterable[tuple[str, str, Vector]]
) -> set[str]:
    """The dispatches (id, tenant, demand) refused because they would take their tenant past its quota
    or its cohort past what it has to lend, given what every tenant ``held`` (the whole cluster's, as
    a replica reads it inside its claim), taking ``wanted`` in order. Pure; the quota guard of
    PostgreSQL replicas (``flux.dispatcher.state.quotas.ClusterQuota``)."""
    accounts = Accounts(tenants)
    for name, amount in held.items():
        accounts.charge(name, amount)
    ledger = Ledger(accounts)
    refused = set()
    for execution_id, tenant, amount in wanted:
        if ledger.fits(tenant, amount):
            ledger.charge(tenant, amount)
        else:
            refused.add(execution_id)
    return refused
