"""Reclaim: which borrowed executions to preempt so a tenant gets its nominal quota back.

The rule (Kueue's ``reclaimWithinCohort``, as issue 24 states it): a tenant
whose pending execution would keep it within its nominal quota on everything
it asks for, and which cannot be placed now, may preempt executions of the
tenants of its cohort that are *borrowing* (using above their nominal quota) on
a resource it needs. Victims go lowest priority first, then newest first.
Every execution holds one execution slot (``flux.matching.tenancy.demand``), so
a tenant under its ``executions`` quota reclaims slots from a cohort member
above its own, even from work that requests nothing: its victims free the
worker's slots (``capacity``) as well as their cores.

The victim set is the smallest that makes room, and only one that does is ever
returned (Volcano #5984 preempted work that freed nothing): with the victims
gone, the execution fits one worker (by reservations, as aging judges a
nominee: observed load from outside Flux cannot be promised) and its tenant's
quota. Each victim is needed: without any one of them it would not fit.
Among workers, the plan with fewest victims wins, then the least important
victims, then the worker's name.

Pure, like the rest of flux/matching: the dispatcher stops the victims (with a
grace period), fences their generation and requeues them without counting a
failed attempt; this module only decides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from flux.matching.aging import BookedRoom
from flux.matching.filters import fits_now, permanent_rejection
from flux.matching.gang_preemption import plan_gang
from flux.matching.preemption_room import (
    Preemption,
    Running,
    _quota_fits,
    _room_fits,
    _still_borrowing,
)
from flux.matching.shape import Shape
from flux.matching.tenancy import ZERO, Accounts, Ledger
from flux.matching.view import WorkerView


class Budget:
    """How many victims each tenant's preemptions may stop: ``per_minute`` in any minute.

    A token bucket per tenant, holding up to ``per_minute`` and refilled at ``per_minute`` a
    minute (so a tenant that was quiet may reclaim a whole minute's worth at once, and one that
    preempts in a loop gets ``per_minute`` a minute, no more). A plan is allowed while the bucket
    holds at least its victims (or, for a plan larger than the whole budget, while the bucket is
    full: it is not starved forever, and its debt is repaid before the next one). Without a budget
    a tenant that submits and cancels in a loop could stop another tenant's borrowed work again
    and again without ever using the room.

    Pure: the caller passes the time, so tests and the dispatcher share one clock story.
    ``per_minute`` 0 is no limit.
    """

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        # Tenant -> (tokens, when they were counted).
        self._buckets: dict[str, tuple[float, float]] = {}

    def _tokens(self, tenant: str, now: float) -> float:
        tokens, at = self._buckets.get(tenant, (float(self.per_minute), now))
        return min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60.0)

    def _needed(self, victims: int) -> float:
        return float(min(victims, self.per_minute))

    def allows(self, tenant: str, victims: int, now: float) -> bool:
        if self.per_minute <= 0:
            return True
        return self._tokens(tenant, now) >= self._needed(victims) - 1e-9

    def next_in(self, tenant: str, victims: int, now: float) -> float:
        """Seconds until ``allows`` holds for ``victims`` (0 when it holds now)."""
        if self.allows(tenant, victims, now):
            return 0.0
        missing = self._needed(victims) - self._tokens(tenant, now)
        return missing * 60.0 / self.per_minute

    def spend(self, tenant: str, victims: int, now: float) -> None:
        if self.per_minute <= 0:
            return
        self._buckets[tenant] = (self._tokens(tenant, now) - victims, now)

    def refund(self, tenant: str, victims: int, now: float) -> None:
        """Victims that were not stopped after all (a plan that no longer held, or that another replica acted for)."""
        if self.per_minute <= 0 or tenant not in self._buckets:
            return
        self._buckets[tenant] = (min(float(self.per_minute), self._tokens(tenant, now) + victims), now)

    def held_back(self, tenant: str, victims: int, now: float) -> str:
        """For explain: ``reclaim held back: tenant's preemption budget of 60 a minute is spent; next in 12 s``."""
        wait = self.next_in(tenant, victims, now)
        if wait <= 0:
            return ""
        return (
            f"reclaim held back: tenant's preemption budget of {self.per_minute} a minute is spent; "
            f"next in {max(1, math.ceil(wait))} s"
        )


def reclaimable(accounts: Accounts, shape: Shape) -> bool:
    """Whether ``shape``'s tenant, placing it, stays within its nominal quota on all it asks for."""
    terms = accounts.terms.get(shape.tenant)
    if terms is None or not terms.cohort:
        return False
    used = accounts.used(shape.tenant)
    asked = [i for i in range(len(ZERO)) if shape.demand[i]]
    if not any(terms.nominal[i] is not None for i in asked):
        return False  # nothing it asks for is under a quota: it has nothing to reclaim
    return all(terms.nominal[i] is None or used[i] + shape.demand[i] <= terms.nominal[i] for i in asked)


def plan(
    accounts: Accounts,
    execution_id: str,
    shape: Shape,
    workers: Iterable[WorkerView],
    running: Iterable[Running],
) -> Preemption | None:
    """The smallest set of borrowed executions whose preemption lets ``execution_id`` (of ``shape``) run.

    None when its tenant may not reclaim (see ``reclaimable``), when it could be placed
    without preempting anything, or when no set of eligible victims makes room. A gang's plan
    makes room for every member at once, or there is none (``flux.matching.gang_preemption``).
    """
    if not reclaimable(accounts, shape):
        return None
    views = [view for view in workers if permanent_rejection(shape, view) is None and not view.paused]
    if not views:
        return None
    gang = shape.gang is not None and shape.gang.size > 1
    if (
        not gang
        and Ledger(accounts).fits(shape.tenant, shape.demand)
        and any(fits_now(shape, BookedRoom(view)) for view in views)
    ):
        return None  # it fits: placing it is the scheduler's job, not preemption's
    cohort = accounts.cohort_of(shape.tenant)
    asked = [i for i in range(len(ZERO)) if shape.demand[i]]
    eligible = sorted(
        (
            r
            for r in running
            if r.tenant != shape.tenant
            and accounts.cohort_of(r.tenant) == cohort
            and any(r.shape.demand[i] for i in asked)
        ),
        key=lambda r: (r.priority, -r.seq, r.execution_id, r.worker),
    )
    if gang:
        # Room on ``size`` workers at once, for the whole gang or none.
        return plan_gang(accounts, execution_id, shape, views, eligible)
    best: tuple[tuple[int, tuple[tuple[int, int], ...], str], Preemption] | None = None
    for view in sorted(views, key=lambda v: v.name):
        victims = _victims_for(accounts, shape, view, eligible)
        if victims is None:
            continue
        rank = (len(victims), tuple(sorted((v.priority, -v.seq) for v in victims)), view.name)
        if best is None or rank < best[0]:
            best = (rank, Preemption(execution_id, view.name, tuple(victims)))
    return best[1] if best is not None else None


def _victims_for(
    accounts: Accounts, shape: Shape, view: WorkerView, eligible: Sequence[Running]
) -> list[Running] | None:
    """Greedy then pruned: victims on ``view`` until it has room, then anywhere until the quota fits;
    then every victim whose removal still leaves room is dropped (so each one is needed)."""
    chosen: list[Running] = []
    for victim in eligible:
        if (
            victim.worker == view.name
            and not _room_fits(shape, view, chosen)
            and _still_borrowing(accounts, victim, chosen, shape)
        ):
            chosen.append(victim)
    if not _room_fits(shape, view, chosen):
        return None
    for victim in eligible:
        if _quota_fits(accounts, shape, chosen):
            break
        if victim not in chosen and _still_borrowing(accounts, victim, chosen, shape):
            chosen.append(victim)
    if not _quota_fits(accounts, shape, chosen):
        return None
    for victim in reversed(list(chosen)):
        rest = [v for v in chosen if v is not victim]
        if _room_fits(shape, view, rest) and _quota_fits(accounts, shape, rest):
            chosen = rest
    return chosen or None
