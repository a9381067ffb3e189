"""Fair share in a pass (see ``flux.matching.tenancy``): which tenant's lane places next.

``flux.matching.scheduler`` hands the pass here when it has ``accounts``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from flux.matching.candidates import FeasibilityCache, Head, Loads, Placement
from flux.matching.filters import fits_now
from flux.matching.gangs import Topology, exhausted, open_gang_loads
from flux.matching.gangs import place as place_one
from flux.matching.index import FleetIndex
from flux.matching.packing import Packing
from flux.matching.queue import PendingQueue
from flux.matching.shape import Shape
from flux.matching.tenancy import Ledger
from flux.matching.view import Room, WorkerView


def place_fairly(
    queue: PendingQueue,
    heads: list[Head] | None,
    ledger: Ledger,
    index: FleetIndex | None,
    cache: FeasibilityCache,
    rooms: dict[str, Room],
    placements: list[Placement],
    limit: int | None,
    candidates_for: Callable[[Shape], list[WorkerView] | None],
    fitting: dict[Shape, set[str]],
    packing: Packing,
) -> None:
    """The main loop with tenants: a heap of tenants by (share, their next execution's order),
    each over its own heap of shape heads (lanes) by order.

    Every key in the tenant heap is a lower bound of the tenant's true key, and an entry
    is acted on only once it is exact at the top (so the top is truly the least):
    - Without ``heads`` every tenant's lanes are in play, and a tenant enters under its
      share and its first item over all its shapes; its lanes are opened only when it
      reaches the top. A pass over one freed worker then costs O(tenants + the lanes of
      the tenants it reaches), not O(tenants x requirements).
    - A lane whose requirement no worker has room for any more is dropped when it
      surfaces; the tenant's key then grows, and it is re-filed before anything is tried.
    - A tenant's share changes only when it places, and then it is the top.

    Placing for a tenant changes only its own share, so only its entry is re-keyed (it is
    the top); O(log tenants + log its lanes) a placement. Entries are lists re-keyed in
    place and sifted with ``heapreplace(heap, same entry)``: a pass makes thousands of
    placements, and a fresh tuple for each key feeds the garbage collector.
    """
    # A lane: [-priority, seq, place, item, rest (None until it places), shape, candidates].
    # A tenant: [share, -priority, seq of its next (or a bound), tenant, its lanes or None].
    if heads is not None and len(heads) == 1:
        _place_lane(queue, heads[0], ledger, index, cache, rooms, placements, limit, packing)
        return
    tenants: list[list] = []
    if heads is not None:
        by_tenant: dict[str, list[list]] = {}
        for order, place, item, items, shape, candidates in heads:
            by_tenant.setdefault(shape.tenant, []).append(
                [order[0], order[1], place, item, items, shape, candidates]
            )
        needed = {head[4].needs for head in heads}
        for name, lane in by_tenant.items():
            heapq.heapify(lane)
            top = lane[0]
            tenants.append([ledger.share(name), top[0], top[1], name, lane])
    else:
        needed = {needs for needs in queue.requirements() if candidates_for(needs) != []}
        if not needed:
            return  # nothing pending fits any worker of this pass
        share = ledger.accounts.shares.get
        tenants = [
            [share(name, 0.0), -first.priority, first.seq, name, None] for name, first in queue.tenants()
        ]
    heapq.heapify(tenants)
    # Per requirement, not per lane: which worker is least loaded and fits does not depend on the tenant.
    by_load: dict[Shape, Loads | Topology] = {}
    # Requirements no worker of the pass has room for any more: every lane of theirs is done, and
    # once all are, so is the pass (without visiting each tenant's lanes).
    full: set[Shape] = set()
    requirements = len(needed)
    # Kept exactly when the pass is over a few workers: a placement there is re-checked against
    # each requirement still fitting that worker, so the pass ends as soon as nothing fits.
    watched = [(needs, names) for needs, names in fitting.items() if needs in needed]
    places = 0
    while tenants and (limit is None or len(placements) < limit):
        entry = tenants[0]
        name, lane = entry[3], entry[4]
        if lane is None:
            lane = entry[4] = []
            for shape in queue.lanes(name):
                candidates = candidates_for(shape)
                if (candidates is not None and not candidates) or shape.needs in full:
                    continue
                item = queue.first(shape)
                assert item is not None
                lane.append([-item.priority, item.seq, places, item, None, shape, candidates])
                places += 1
            heapq.heapify(lane)
        else:
            # Lanes whose requirement no worker has room for any more are dropped as they surface;
            # if the head changed, the tenant's key grew: re-filed below before anything is tried.
            while lane and lane[0][5].needs in full:
                heapq.heappop(lane)
        if lane and lane[0][1] == entry[2]:
            head = lane[0]
            shape = head[5]
            placement = None
            if ledger.fits(name, shape.demand):
                loads = by_load.get(shape.needs)
                if loads is None:
                    loads = open_gang_loads(shape, head[6], index, cache, rooms, packing)
                    by_load[shape.needs] = loads
                placement = place_one(head[3].execution_id, shape, loads, rooms, packing)
                if placement is None and exhausted(loads):
                    full.add(shape.needs)
                    if len(full) == requirements:
                        return
            if placement is None:
                heapq.heappop(lane)
            else:
                placements.append(placement)
                entry[0] = ledger.charge(name, shape.demand)  # its share: only a placement changes it
                for worker in placement.members or ((placement.worker, ()),):
                    room = rooms[worker[0]]
                    for needs, names in watched:
                        if room.view.name in names and not fits_now(needs, room):
                            names.discard(room.view.name)
                            if not names:
                                full.add(needs)
                if len(full) == requirements:
                    return
                rest = head[4]
                if rest is None:
                    rest = head[4] = queue.iter_shape(shape)
                    next(rest)  # the one just placed
                following = next(rest, None)
                if following is None:
                    heapq.heappop(lane)
                else:
                    head[0], head[1], head[3] = -following.priority, following.seq, following
                    heapq.heapreplace(lane, head)
        if lane:
            top = lane[0]
            entry[1], entry[2] = top[0], top[1]
            heapq.heapreplace(tenants, entry)
        else:
            heapq.heappop(tenants)


def _place_lane(
    queue: PendingQueue,
    head: Head,
    ledger: Ledger,
    index: FleetIndex | None,
    cache: FeasibilityCache,
    rooms: dict[str, Room],
    placements: list[Placement],
    limit: int | None,
    packing: Packing,
) -> None:
    """``place_fairly`` for one lane (a submission's pass): one tenant, so no share to compare;
    its quota still decides, and space and quota only shrink, so the first miss ends it."""
    _, _, item, items, shape, candidates = head
    loads = open_gang_loads(shape, candidates, index, cache, rooms, packing)
    while item is not None and (limit is None or len(placements) < limit):
        if not ledger.fits(shape.tenant, shape.demand):
            return
        placement = place_one(item.execution_id, shape, loads, rooms, packing)
        if placement is None:
            return
        placements.append(placement)
        ledger.charge(shape.tenant, shape.demand)
        if items is None:
            items = queue.iter_shape(shape)
            next(items)  # the one just placed
        item = next(items, None)
