"""One scheduling pass: place pending executions on workers, by priority then FIFO, least loaded first.

This is where every dispatch decision is made. Given the pending queue and
immutable worker views it returns placements; it does no I/O and changes
nothing but the ``Aging`` it is handed (which starving executions it placed,
nominated a worker, or dropped), and the tenant accounts it charges only in its
own pass-local copy. The dispatcher commits the placements (reservations,
store, push) afterwards.

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
shapes opens a tenant's lanes only when it comes up (``_place_fairly``). Over
a ``FleetIndex`` the candidates are pulled lazily, least loaded first, so
"candidates" is only those looked at: on a fleet with room, one per placement.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from flux.matching.aging import Aging, Nomination, shortfall, slack_beside
from flux.matching.filters import fits_now, permanent_rejection
from flux.matching.index import FleetIndex
from flux.matching.queue import Pending, PendingQueue
from flux.matching.reasons import Rejection
from flux.matching.shape import Shape
from flux.matching.tenancy import Accounts, Ledger
from flux.matching.view import Profile, Room, WorkerView

# A shape's head in a pass: (its order, the shape's place, the item, the rest, shape, candidates or None).
_Head = tuple[tuple[int, int], int, Pending, Iterator[Pending] | None, Shape, list[WorkerView] | None]


@dataclass(frozen=True, slots=True)
class Placement:
    execution_id: str
    worker: str
    gpu_indices: tuple[int, ...]
    shape: Shape


class FeasibilityCache:
    """Memo of ``permanent_rejection`` per (shape, profile); both are immutable, so it never goes stale."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self._verdicts: dict[tuple[Shape, Profile], Rejection | None] = {}
        self._max_entries = max_entries

    def permanent(self, shape: Shape, view: WorkerView) -> Rejection | None:
        shape = shape.needs  # the tenant never decides fit
        key = (shape, view.profile)
        try:
            return self._verdicts[key]
        except KeyError:
            pass
        if len(self._verdicts) >= self._max_entries:
            self._verdicts.clear()  # shapes and fleets churn slowly; a rare full reset is cheap
        verdict = self._verdicts[key] = permanent_rejection(shape, view)
        return verdict


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
    """
    cache = cache if cache is not None else FeasibilityCache()
    index = workers if isinstance(workers, FleetIndex) else None
    if index is not None and _aging_needs_fleet(queue, aging, now, starving_first, len(index)):
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
    if index is None and aging is not None and aging.enabled:
        if starving_first:
            skip = _age(queue, by_profile, cache, rooms, placements, aging, now, whole_fleet, limit, ledger)
        else:
            skip = _guard_standing(aging, by_profile, rooms, queue)

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
                candidates = [view for view in candidates if fits_now(shape, _room(rooms, view))]
                fitting[shape.needs] = {view.name for view in candidates}
            candidates_of[shape.needs] = candidates
        return candidates

    if ledger is not None and shapes is None and not skip:
        # Every lane of every tenant: opened tenant by tenant, as each comes up (``_place_fairly``).
        _place_fairly(queue, None, ledger, index, cache, rooms, placements, limit, candidates_for, fitting)
        return placements

    heads: list[_Head] = []
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
        _place_fairly(queue, heads, ledger, index, cache, rooms, placements, limit, candidates_for, fitting)
        return placements
    heapq.heapify(heads)

    by_load: dict[int, _Loads] = {}
    while heads and (limit is None or len(placements) < limit):
        _, order, item, items, shape, candidates = heads[0]
        loads = by_load.get(order)
        if loads is None:
            if candidates is None:
                assert index is not None
                loads = by_load[order] = _Loads([], index.candidates(shape, cache.permanent))
            else:
                loads = by_load[order] = _Loads(_load_heap(candidates, rooms))
        room = _least_loaded_fit(loads, shape, rooms)
        if room is None:
            heapq.heappop(heads)
            continue
        requests = shape.requests
        gpus = room.take(requests.cpu, requests.memory, requests.disk, requests.gpu, requests.gpu_memory)
        placements.append(Placement(item.execution_id, room.view.name, gpus, shape))
        heapq.heappush(loads.heap, (room.key, room))
        following = next(items, None)
        if following is None:
            heapq.heappop(heads)
        else:
            heapq.heapreplace(heads, (following.order, order, following, items, shape, candidates))
    return placements


def _age(
    queue: PendingQueue,
    by_profile: dict[Profile, list[WorkerView]],
    cache: FeasibilityCache,
    rooms: dict[str, Room],
    placements: list[Placement],
    aging: Aging,
    now: float,
    whole_fleet: bool,
    limit: int | None,
    ledger: Ledger | None = None,
) -> set[str]:
    """Place or nominate the starving executions, oldest first; return the ids the main pass skips.

    Guards each nominated worker present in this pass by giving its room a
    ``slack``: what is left beside the nominee, which every later placement
    there must fit too. A starving execution its tenant's quota cannot take
    now is neither placed nor nominated: no worker's room would help it, and
    guarding one would only hold back others.
    """
    starving = sorted(
        (item for shape in queue.shapes() if (item := queue.oldest(shape)) and aging.starving(item, now)),
        key=lambda item: item.seq,
    )
    keep = {item.execution_id for item in starving}
    for execution_id in [e for e in aging.by_execution if e not in keep]:
        aging.drop(execution_id)  # placed, cancelled, or no longer the oldest of its shape
    present = {view.name: view for views in by_profile.values() for view in views}
    claimed: set[str] = set()
    skip: set[str] = set()
    if len(present) > Aging.SMALL_PASS and now < aging.next_search:
        _keep_nominations(starving, aging, present, rooms, placements, claimed, skip, limit, ledger)
        return skip
    if len(present) > Aging.SMALL_PASS:
        aging.next_search = now + aging.search_every
    for item in starving:
        shape = item.shape
        if ledger is not None and not ledger.fits(shape.tenant, shape.demand):
            aging.drop(item.execution_id)
            continue
        candidates = [
            view
            for views in by_profile.values()
            if cache.permanent(shape, views[0]) is None
            for view in views
        ]
        previous = aging.by_execution.get(item.execution_id)
        if not candidates:
            aging.drop(item.execution_id)  # nothing here could ever run it: explain calls it infeasible
            continue
        skip.add(item.execution_id)
        for view in candidates:
            if view.name not in rooms:
                rooms[view.name] = Room(view)
        room = _starving_fit(item, previous, candidates, rooms, claimed)
        if room is not None and (limit is None or len(placements) < limit):
            r = shape.requests
            # Its own nominated worker has no slack yet: the nominee itself is what it was kept for.
            gpus = room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory)
            placements.append(Placement(item.execution_id, room.view.name, gpus, shape))
            if ledger is not None:
                ledger.charge(shape.tenant, shape.demand)
            aging.drop(item.execution_id)
            continue
        if previous is not None and previous.worker not in claimed:
            if previous.worker in present:
                _guard(rooms, present[previous.worker], item, claimed)
                continue
            if not whole_fleet:
                claimed.add(previous.worker)  # not in this pass: kept until a whole-fleet pass says otherwise
                continue
        free = [rooms[v.name] for v in candidates if v.name not in claimed]
        if not free:
            aging.drop(item.execution_id)  # every capable worker guards an older one; next pass
            continue
        best = min(free, key=lambda room: shortfall(shape, room))
        aging.nominate(
            Nomination(
                item.execution_id,
                best.view.name,
                shape,
                item.since,
                previous.nominated_at if previous and previous.worker == best.view.name else now,
            )
        )
        _guard(rooms, best.view, item, claimed)
    return skip


def _place_fairly(
    queue: PendingQueue,
    heads: list[_Head] | None,
    ledger: Ledger,
    index: FleetIndex | None,
    cache: FeasibilityCache,
    rooms: dict[str, Room],
    placements: list[Placement],
    limit: int | None,
    candidates_for: Callable[[Shape], list[WorkerView] | None],
    fitting: dict[Shape, set[str]],
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
        _place_lane(queue, heads[0], ledger, index, cache, rooms, placements, limit)
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
    by_load: dict[Shape, _Loads] = {}
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
            room = None
            if ledger.fits(name, shape.demand):
                loads = by_load.get(shape.needs)
                if loads is None:
                    candidates = head[6]
                    if candidates is None:
                        assert index is not None
                        loads = _Loads([], index.candidates(shape, cache.permanent))
                    else:
                        loads = _Loads(_load_heap(candidates, rooms))
                    by_load[shape.needs] = loads
                room = _least_loaded_fit(loads, shape, rooms)
                if room is None and not loads.heap and loads.upcoming is None:
                    full.add(shape.needs)
                    if len(full) == requirements:
                        return
            if room is None:
                heapq.heappop(lane)
            else:
                r = shape.requests
                gpus = room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory)
                placements.append(Placement(head[3].execution_id, room.view.name, gpus, shape))
                entry[0] = ledger.charge(name, shape.demand)  # its share: only a placement changes it
                heapq.heappush(loads.heap, (room.key, room))
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
    head: _Head,
    ledger: Ledger,
    index: FleetIndex | None,
    cache: FeasibilityCache,
    rooms: dict[str, Room],
    placements: list[Placement],
    limit: int | None,
) -> None:
    """``_place_fairly`` for one lane (a submission's pass): one tenant, so no share to compare;
    its quota still decides, and space and quota only shrink, so the first miss ends it."""
    _, _, item, items, shape, candidates = head
    if candidates is None:
        assert index is not None
        loads = _Loads([], index.candidates(shape, cache.permanent))
    else:
        loads = _Loads(_load_heap(candidates, rooms))
    r = shape.requests
    while item is not None and (limit is None or len(placements) < limit):
        if not ledger.fits(shape.tenant, shape.demand):
            return
        room = _least_loaded_fit(loads, shape, rooms)
        if room is None:
            return
        gpus = room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory)
        placements.append(Placement(item.execution_id, room.view.name, gpus, shape))
        ledger.charge(shape.tenant, shape.demand)
        heapq.heappush(loads.heap, (room.key, room))
        if items is None:
            items = queue.iter_shape(shape)
            next(items)  # the one just placed
        item = next(items, None)


def _guard_standing(
    aging: Aging, by_profile: dict[Profile, list[WorkerView]], rooms: dict[str, Room], queue: PendingQueue
) -> set[str]:
    """Guard the nominated workers of this pass and skip their nominees; place and nominate nothing."""
    present = {view.name: view for views in by_profile.values() for view in views}
    claimed: set[str] = set()
    skip: set[str] = set()
    for nomination in aging.by_execution.values():
        item = queue.get(nomination.execution_id)
        view = present.get(nomination.worker)
        if item is not None and view is not None:
            skip.add(item.execution_id)
            _guard(rooms, view, item, claimed)
    return skip


def _keep_nominations(
    starving: list[Pending],
    aging: Aging,
    present: dict[str, WorkerView],
    rooms: dict[str, Room],
    placements: list[Placement],
    claimed: set[str],
    skip: set[str],
    limit: int | None,
    ledger: Ledger | None = None,
) -> None:
    """Between full searches: place each nominee on its worker if it fits now, else keep guarding it."""
    for item in starving:
        nomination = aging.by_execution.get(item.execution_id)
        if nomination is None or nomination.worker not in present:
            continue
        if ledger is not None and not ledger.fits(item.shape.tenant, item.shape.demand):
            aging.drop(item.execution_id)
            continue
        skip.add(item.execution_id)
        view = present[nomination.worker]
        room = rooms.get(view.name)
        if room is None:
            room = rooms[view.name] = Room(view)
        if fits_now(item.shape, room) and (limit is None or len(placements) < limit):
            r = item.shape.requests
            gpus = room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory)
            placements.append(Placement(item.execution_id, view.name, gpus, item.shape))
            if ledger is not None:
                ledger.charge(item.shape.tenant, item.shape.demand)
            aging.drop(item.execution_id)
        else:
            _guard(rooms, view, item, claimed)


def _starving_fit(
    item: Pending,
    previous: Nomination | None,
    candidates: list[WorkerView],
    rooms: dict[str, Room],
    claimed: set[str],
) -> Room | None:
    """Where a starving execution fits now: its nominated worker first, else the least loaded.

    A worker guarded for an older nominee takes it only beside that one (its slack).
    """
    if previous is not None:
        own = rooms.get(previous.worker)
        if own is not None and previous.worker not in claimed and fits_now(item.shape, own):
            return own
    fitting = [rooms[v.name] for v in candidates if fits_now(item.shape, rooms[v.name])]
    return min(fitting, key=lambda room: room.key, default=None)


def _guard(rooms: dict[str, Room], view: WorkerView, item: Pending, claimed: set[str]) -> None:
    room = rooms.get(view.name)
    if room is None:
        room = rooms[view.name] = Room(view)
    room.slack = slack_beside(view, item.shape, room)
    claimed.add(view.name)


def _room(rooms: dict[str, Room], view: WorkerView) -> Room:
    room = rooms.get(view.name)
    if room is None:
        room = rooms[view.name] = Room(view)
    return room


def _load_heap(
    candidates: list[WorkerView], rooms: dict[str, Room]
) -> list[tuple[tuple[float, float, str], Room]]:
    entries = []
    for view in candidates:
        room = rooms.get(view.name)
        if room is None:
            room = rooms[view.name] = Room(view)
        entries.append((room.key, room))
    heapq.heapify(entries)
    return entries


class _Loads:
    """One shape's candidates in a pass: a heap of rooms by load key, and the index's walk not yet pulled."""

    __slots__ = ("heap", "source", "upcoming")

    def __init__(
        self,
        heap: list[tuple[tuple[float, float, str], Room]],
        source: Iterator[tuple[tuple[float, float, str], WorkerView]] | None = None,
    ):
        self.heap = heap
        self.source = source
        self.upcoming = next(source, None) if source is not None else None


def _least_loaded_fit(loads: _Loads, shape: Shape, rooms: dict[str, Room]) -> Room | None:
    """Pop and return the least-loaded room that fits ``shape`` now, or None.

    Entries may be stale because another shape placed on the same worker. Load
    keys only grow within a pass, so a stale entry understates its key: when
    the top entry is current, it is the true minimum of the heap. A worker not
    pulled from the index's walk yet has at least the key it was filed under,
    so the heap's top is decided on only once the walk's next key is above it.
    """
    heap = loads.heap
    while True:
        if heap:
            key, room = heap[0]
            if room.key is not key:
                heapq.heapreplace(heap, (room.key, room))
                continue
        upcoming = loads.upcoming
        if upcoming is not None and (not heap or upcoming[0] < heap[0][0]):
            assert loads.source is not None
            loads.upcoming = next(loads.source, None)
            view = upcoming[1]
            room = rooms.get(view.name)
            if room is None:
                room = rooms[view.name] = Room(view)
            heapq.heappush(heap, (room.key, room))
            continue
        if not heap:
            return None
        room = heapq.heappop(heap)[1]
        if fits_now(shape, room):
            return room


def _aging_needs_fleet(
    queue: PendingQueue, aging: Aging | None, now: float, starving_first: bool, fleet: int
) -> bool:
    """Whether aging has work in this pass (it then needs every view); if not, what it would have
    done with none (advance its search clock, see ``_age``) is done here."""
    if aging is None or not aging.enabled:
        return False
    if aging.by_execution:
        return True
    if not starving_first:
        return False
    for shape in queue.shapes():
        item = queue.oldest(shape)
        if item is not None and aging.starving(item, now):
            return True
    if fleet > Aging.SMALL_PASS and now >= aging.next_search:
        aging.next_search = now + aging.search_every
    return False
