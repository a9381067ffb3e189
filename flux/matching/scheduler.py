"""One scheduling pass: place pending executions on workers, by priority then FIFO, least loaded first
(or, under the binpack placement policy, fullest first: ``flux.matching.placement``).

This is where every dispatch decision is made. Given the pending queue and
immutable worker views it returns placements; it does no I/O and changes
nothing but the ``Aging`` it is handed (which starving executions it placed,
nominated a worker, or dropped), and the tenant accounts it charges only in its
own pass-local copy. The dispatcher commits the placements (reservations,
store, push) afterwards. The pass is ``schedule`` below; the parts it calls
live by role beside it: ``candidates`` (the permanent-fit memo, the heaps of
rooms by load, ``Placement``), ``starving`` (aging's placements and guards)
and ``fairshare`` (the tenants' level).

How a pass runs (Nomad's feasibility-then-rank, adapted to a queue):
1. Workers are grouped by ``Profile``; each (shape, profile) pair is checked
   once for *permanent* fit (labels, totals, packages) and cached across passes.
2. The first head among all shapes is placed next (a heap of shape heads keyed
   by (-priority, seq)), so higher priority goes first and order is FIFO by
   submission within a priority, across shapes.
3. A shape's candidates sit in a heap by load key. A candidate that cannot fit
   the shape now is dropped for the rest of the pass: space only shrinks
   within a pass. A shape whose head fits nowhere is done for the pass, so an
   unplaceable execution never blocks the ones behind it in other shapes.
4. Each placement is subtracted from the worker's ``Room`` before the next.

Before that, when ``aging`` is given, starving executions (see
``flux.matching.aging``) are placed first or nominated a worker, and the
nominated workers take only what fits beside their nominee.

With ``accounts`` (tenants, see ``flux.matching.tenancy``) step 2 has two
levels: the tenant whose weighted dominant share is lowest goes next (ties by
its next execution's priority, then submission), and within a tenant its
shape heads go by priority then FIFO as above. A shape is then one tenant's
lane; worker choice and the permanent checks go by its requirement
(``Shape.needs``), shared by every tenant's lane of it. A head that its
tenant's quota (and cohort) cannot take now is done for the pass like one
that fits no worker: usage only grows within a pass. Every placement,
starving ones included, is charged to its tenant before the next decision,
so no burst in one pass exceeds a quota.

Cost is O(shapes × profiles + candidates + placements × (log workers + log
tenants)), never proportional to the backlog; with tenants, a pass over all
shapes opens a tenant's lanes only when it comes up (``place_fairly``). Over a
``FleetIndex`` the candidates are pulled lazily, least loaded first, so
"candidates" is only those looked at: on a fleet with room, one per placement.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from flux.matching.aging import Aging
from flux.matching.candidates import FeasibilityCache, Head, Loads, Placement, room_of
from flux.matching.fairshare import place_fairly
from flux.matching.filters import fits_now
from flux.matching.gangs import Topology, open_gang_loads
from flux.matching.gangs import place as place_one
from flux.matching.index import FleetIndex
from flux.matching.packing import Packing
from flux.matching.placement import DEFAULT_PLACEMENT
from flux.matching.queue import PendingQueue
from flux.matching.shape import Shape
from flux.matching.starving import aging_needs_fleet, guard_standing, place_starving
from flux.matching.tenancy import Accounts, Ledger
from flux.matching.view import Profile, Room, WorkerView


def schedule(
    queue: PendingQueue,
    workers: Iterable[WorkerView] | FleetIndex,
    *,
    shapes: Sequence[Shape] | None = None,
    cache: FeasibilityCache | None = None,
    limit: int | None = None,
    aging: Aging | None = None,
    now: float = 0.0,
    whole_fleet: bool = True,
    starving_first: bool = True,
    accounts: Accounts | None = None,
    placement: str = DEFAULT_PLACEMENT,
) -> list[Placement]:
    """Place as much of ``queue`` as fits on ``workers``; at most ``limit`` placements.

    ``shapes`` restricts the pass to those shapes (a new submission needs only
    its own); ``workers`` may be a subset (a worker that just freed space is
    the only one where something new can fit). With ``aging`` (state kept by
    the caller across passes) starving executions, judged at ``now``, come
    first whatever ``shapes`` says, and their nominated workers are guarded;
    ``whole_fleet`` says ``workers`` are all of them, so a nomination to a
    worker not among them is stale. ``starving_first=False`` only guards the
    standing nominations: every placement is then of ``shapes`` (a caller that
    places one new submission and nothing else).

    ``workers`` may be a ``FleetIndex``: each shape then walks only its candidates,
    least loaded first, as far as it needs to, and the answer is the same as over
    the index's views as a list. Aging searches the whole fleet, so while it has
    anything to do (a starving execution, a standing nomination) the index is
    read as that list.

    ``accounts`` (kept by the caller, read only) holds each tenant's quota and
    usage: placements then respect quotas and go by fair share between tenants.

    ``placement``: the server's policy for shapes that name none (``spread`` or ``binpack``).
    """
    cache = cache if cache is not None else FeasibilityCache()
    index = workers if isinstance(workers, FleetIndex) else None
    if index is not None and aging_needs_fleet(queue, aging, now, starving_first, len(index)):
        workers, index = list(index.views()), None
    by_profile: dict[Profile, list[WorkerView]] = {}
    if index is None:
        for view in workers:
            by_profile.setdefault(view.profile, []).append(view)
        if not by_profile:
            return []
    elif not len(index):
        return []

    rooms: dict[str, Room] = {}
    placements: list[Placement] = []
    skip: set[str] = set()
    ledger = Ledger(accounts) if accounts is not None else None
    packing = Packing(placement)
    if index is None and aging is not None and aging.enabled:
        if starving_first:
            skip = place_starving(
                queue, by_profile, cache, rooms, placements, aging, now, whole_fleet, limit, ledger
            )
        else:
            skip = guard_standing(aging, by_profile, rooms, queue, placements, shapes, ledger)

    # Candidates per requirement: every tenant's lane of one requirement shares them.
    candidates_of: dict[Shape, list[WorkerView]] = {}
    # In a pass over a few workers: per requirement, the workers that still have room for it.
    fitting: dict[Shape, set[str]] = {}

    def candidates_for(shape: Shape) -> list[WorkerView] | None:
        """The workers of this pass that could take ``shape`` (None over an index: walked lazily)."""
        if index is not None:
            return None
        candidates = candidates_of.get(shape.needs)
        if candidates is None:
            candidates = [
                view
                for views in by_profile.values()
                if cache.permanent(shape, views[0]) is None
                for view in views
            ]
            if ledger is not None and len(candidates) <= Aging.SMALL_PASS:
                # Tenants multiply the lanes of one requirement; in a pass over a few workers
                # (one that freed room), those without room for it now are dropped here, once
                # per requirement, so its lanes are never even opened. Space only shrinks in a pass.
                candidates = [view for view in candidates if fits_now(shape, room_of(rooms, view))]
                fitting[shape.needs] = {view.name for view in candidates}
            candidates_of[shape.needs] = candidates
        return candidates

    if ledger is not None and shapes is None and not skip:
        # Every lane of every tenant: opened tenant by tenant, as each comes up (``place_fairly``).
        place_fairly(
            queue, None, ledger, index, cache, rooms, placements, limit, candidates_for, fitting, packing
        )
        return placements

    heads: list[Head] = []
    # Deduplicated: two heads over one shape's queue would place the same execution twice.
    for order, shape in enumerate(dict.fromkeys(shapes) if shapes is not None else queue.shapes()):
        candidates = candidates_for(shape)
        if candidates is not None and not candidates:
            continue
        items = queue.iter_shape(shape)
        if skip:
            items = (item for item in items if item.execution_id not in skip)
        first = next(items, None)
        if first is not None:
            # Over an index, candidates (None) are walked lazily.
            heads.append((first.order, order, first, items, shape, candidates))
    if ledger is not None:
        place_fairly(
            queue, heads, ledger, index, cache, rooms, placements, limit, candidates_for, fitting, packing
        )
        return placements
    heapq.heapify(heads)

    by_load: dict[int, Loads | Topology] = {}
    while heads and (limit is None or len(placements) < limit):
        _, order, item, items, shape, candidates = heads[0]
        loads = by_load.get(order)
        if loads is None:
            loads = by_load[order] = open_gang_loads(shape, candidates, index, cache, rooms, packing)
        placement = place_one(item.execution_id, shape, loads, rooms, packing)
        if placement is None:
            heapq.heappop(heads)
            continue
        placements.append(placement)
        following = next(items, None)
        if following is None:
            heapq.heappop(heads)
        else:
            heapq.heapreplace(heads, (following.order, order, following, items, shape, candidates))
    return placements
