"""The demand on pools: how many workers each needs to run what is pending and running.

Demand is computed per requirement shape, never per pending row:

1. Each pending shape goes to at most one pool: among the pools whose idle
   worker could ever run it (the matcher's own permanent filters, memoised in
   the ``FeasibilityCache``), the one the matcher would choose first. The
   matcher picks the least loaded capable worker, so the pool holding the
   least loaded connected worker wins; pools without a connected worker come
   after, by name. Counted once, it never makes two pools scale for one
   execution.
2. A pool's workers needed = its busy workers (something runs there and must
   finish) plus ``ceil(sum(count_s / per_worker_s))`` over its pending shapes,
   where ``per_worker_s`` is how many executions of shape ``s`` one idle worker
   of the pool holds at once (the tightest of capacity, cores, memory, disk,
   GPUs). Pending work fits no connected worker (the dispatcher places what
   fits at once), so it needs new workers. The result is kept within the
   pool's min and max.

Pending includes work waiting out a retry's backoff whose next try is due within
``RETRY_SOON`` seconds (30 s: about the time a pool's new worker takes to start and connect,
so it is there when the wait ends; a pool has no scale-up time of its own to use instead).
A retry due later is not counted: a 5-minute backoff does not keep a pool awake for 5 minutes.

Cost: O(pending shapes × pools) permanent checks, each memoised, plus
O(workers) to group the fleet: 10,000 pending executions of 100 shapes over
100 pools is 10,000 cached lookups, not 1,000,000 checks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from flux.matching.filters import permanent_rejection
from flux.matching.pools.spec import POOL_LABEL, PoolSpec
from flux.matching.shape import Shape
from flux.matching.view import WorkerView, load_key

if TYPE_CHECKING:
    from flux.matching.candidates import FeasibilityCache


# Seconds before a retry's not-before time from which its execution counts as pending demand.
RETRY_SOON = 30.0


@dataclass(frozen=True, slots=True)
class PoolDemand:
    """One pool now: its workers, the work it should run, and the workers that needs."""

    spec: PoolSpec
    workers: int  # connected and accepting
    busy_workers: int  # of those, the ones running something
    pending: int  # pending executions counted in this pool
    running: int  # executions held by its workers
    needed: int  # busy workers + what the pending need, before min/max
    desired: int  # ``needed`` kept within min and max: what the pool should have

    @property
    def active(self) -> bool:
        """KEDA's IsActive: there is work for the pool (pending or running)."""
        return self.pending > 0 or self.running > 0


def pool_of(view: WorkerView) -> str:
    return view.labels.get(POOL_LABEL, "")


def merge_specs(declared: Iterable[PoolSpec], learned_specs: Iterable[PoolSpec]) -> list[PoolSpec]:
    """Declared pools, plus learned ones not declared (a declaration wins), by name."""
    specs = {spec.name: spec for spec in learned_specs}
    specs.update((spec.name, spec) for spec in declared)
    return [specs[name] for name in sorted(specs)]


def compute_demand(
    specs: Sequence[PoolSpec],
    workers: Iterable[WorkerView],
    pending: Iterable[tuple[Shape, int]],
    cache: FeasibilityCache | None = None,
) -> dict[str, PoolDemand]:
    """Demand per pool (see the module docstring): ``pending`` is (shape, count) per pending shape;
    ``workers`` the accepting workers (paused ones too: a pause is not a reason to scale)."""
    members: dict[str, list[WorkerView]] = {spec.name: [] for spec in specs}
    for view in workers:
        pool = pool_of(view)
        if pool in members:
            members[pool].append(view)
    # The order the matcher would try the pools in: the one with the least loaded worker first.
    order = sorted(
        specs,
        key=lambda s: (
            (0, *load_key(min(members[s.name], key=load_key))) if members[s.name] else (1, 0.0, 0.0, s.name)
        ),
    )
    views = {spec.name: spec.view() for spec in specs}
    check = cache.permanent if cache is not None else permanent_rejection
    counted: dict[str, int] = dict.fromkeys(members, 0)
    load: dict[str, Fraction] = {name: Fraction(0) for name in members}
    for shape, count in pending:
        if count <= 0:
            continue
        for spec in order:
            if check(shape, views[spec.name]) is None:
                counted[spec.name] += count
                if shape.gang is None:
                    load[spec.name] += Fraction(count, spec.per_worker(shape))
                else:  # every member on a worker of its own: at least size workers, however small
                    size = shape.gang.size
                    load[spec.name] += max(Fraction(size), Fraction(count * size, spec.per_worker(shape)))
                break
    result: dict[str, PoolDemand] = {}
    for spec in specs:
        mine = members[spec.name]
        busy = sum(1 for v in mine if v.active > 0)
        needed = busy + math.ceil(load[spec.name])
        desired = max(spec.min_workers, needed)
        if spec.max_workers:
            desired = min(desired, spec.max_workers)
        result[spec.name] = PoolDemand(
            spec=spec,
            workers=len(mine),
            busy_workers=busy,
            pending=counted[spec.name],
            running=sum(v.active for v in mine),
            needed=needed,
            desired=desired,
        )
    return result


def could_run(
    shape: Shape, demands: Iterable[PoolDemand], cache: FeasibilityCache | None = None
) -> list[PoolDemand]:
    """The pools whose idle worker could run ``shape``, for explain: "pool a100 could run it (0 workers)"."""
    check = cache.permanent if cache is not None else permanent_rejection
    return [d for d in demands if check(shape, d.spec.view()) is None]


def could_run_text(pools: Sequence[PoolDemand]) -> str:
    """``pool a100 could run it (0 workers)``; several pools are listed, the first three named."""
    if not pools:
        return ""
    named = [
        f"pool {d.spec.name} could run it ({d.workers} worker{'s' if d.workers != 1 else ''})"
        for d in pools[:3]
    ]
    more = f", and {len(pools) - 3} more pools" if len(pools) > 3 else ""
    return "; ".join(named) + more
