"""The starving executions' part of a pass (see ``flux.matching.aging``): placed first, or
nominated a worker that is then guarded, before ``flux.matching.scheduler`` places the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import flux.matching.gang_aging as gang_aging
from flux.matching.aging import Aging, Nomination, shortfall, slack_beside
from flux.matching.candidates import FeasibilityCache, Placement
from flux.matching.filters import fits_now
from flux.matching.queue import Pending, PendingQueue
from flux.matching.shape import Shape
from flux.matching.tenancy import Ledger
from flux.matching.view import Profile, Room, WorkerView


def place_starving(
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
        if shape.gang is not None:
            _starving_gang(
                item, previous, candidates, rooms, placements, aging, now, whole_fleet, claimed, limit, ledger
            )
            continue
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


def _starving_gang(
    item: Pending,
    previous: Nomination | None,
    candidates: list[WorkerView],
    rooms: dict[str, Room],
    placements: list[Placement],
    aging: Aging,
    now: float,
    whole_fleet: bool,
    claimed: set[str],
    limit: int | None,
    ledger: Ledger | None,
) -> None:
    """A starving gang: placed whole if every member fits now, else its nominated workers kept
    guarded, else a worker per member nominated at once (``flux.matching.gang_aging``), or none."""
    chosen = gang_aging.fitting_now(item.shape, previous, rooms, (v.name for v in candidates))
    if chosen is not None and (limit is None or len(placements) < limit):
        placements.append(gang_aging.place_whole(item, chosen, ledger))
        aging.drop(item.execution_id)
        return
    if previous is not None and not claimed.intersection(previous.workers):
        here = [worker for worker in previous.workers if worker in rooms]
        if len(here) == len(previous.workers) or not whole_fleet:
            # Its workers in this pass are guarded; the others are kept until a whole-fleet pass.
            for worker in here:
                _guard(rooms, rooms[worker].view, item, claimed)
            claimed.update(previous.workers)
            return
    free = [rooms[v.name] for v in candidates if v.name not in claimed]
    nomination = gang_aging.nominate(item, previous, free, now)
    if nomination is None:
        aging.drop(item.execution_id)  # too few capable workers free of older nominees; next pass
        return
    aging.nominate(nomination)
    for worker in nomination.workers:
        _guard(rooms, rooms[worker].view, item, claimed)


def aging_needs_fleet(
    queue: PendingQueue, aging: Aging | None, now: float, starving_first: bool, fleet: int
) -> bool:
    """Whether aging has work in this pass (it then needs every view); if not, what it would have
    done with none (advance its search clock, see ``place_starving``) is done here."""
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


def guard_standing(
    aging: Aging,
    by_profile: dict[Profile, list[WorkerView]],
    rooms: dict[str, Room],
    queue: PendingQueue,
    placements: list[Placement] | None = None,
    shapes: Sequence[Shape] | None = None,
    ledger: Ledger | None = None,
) -> set[str]:
    """Guard the nominated workers of this pass and skip their nominees; nominate nothing, and place
    nothing but a nominated gang of ``shapes`` whose every nominated worker has room for its member
    now (a pass scoped to the worker that freed room never sees the others: the dispatcher's pass
    over the whole fleet for pending gangs places it)."""
    present = {view.name: view for views in by_profile.values() for view in views}
    claimed: set[str] = set()
    skip: set[str] = set()
    for nomination in list(aging.by_execution.values()):
        item = queue.get(nomination.execution_id)
        views = [present[w] for w in nomination.workers if w in present]
        if item is None or not views:
            continue
        skip.add(item.execution_id)
        if (
            placements is not None
            and nomination.members
            and shapes is not None
            and item.shape in shapes
            and len(views) == len(nomination.workers)
            and (ledger is None or ledger.fits(item.shape.tenant, item.shape.demand))
        ):
            _keep_gang(item, nomination, present, rooms, placements, aging, claimed, None, ledger)
            continue
        for view in views:
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
        if nomination.members:
            _keep_gang(item, nomination, present, rooms, placements, aging, claimed, limit, ledger)
            continue
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


def _keep_gang(
    item: Pending,
    nomination: Nomination,
    present: dict[str, WorkerView],
    rooms: dict[str, Room],
    placements: list[Placement],
    aging: Aging,
    claimed: set[str],
    limit: int | None,
    ledger: Ledger | None,
) -> None:
    """Between full searches, a gang's nomination: placed whole on its workers if every member fits
    there now, else each of its workers in this pass kept guarded."""
    views = [present[w] for w in nomination.workers if w in present]
    for view in views:
        if view.name not in rooms:
            rooms[view.name] = Room(view)
    own = [rooms[view.name] for view in views]
    fits = len(own) == len(nomination.workers) and all(fits_now(item.shape, room) for room in own)
    if fits and (limit is None or len(placements) < limit):
        placements.append(gang_aging.place_whole(item, own, ledger))
        aging.drop(item.execution_id)
        return
    for view in views:
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
