"""Aging for a gang: a starving gang is placed whole, or nominated a worker per member at once.

A single starving execution is nominated the one worker with the least to free
(``flux.matching.aging``); a gang needs ``size`` workers at the same time, inside one ``same``
group and on distinct ``spread`` values. So a starving gang is nominated ``size`` workers in one
decision, or none: the group whose ``size`` best workers (by shortfall, one per spread value)
have the least to free in all, each member's worker then guarded as a single nominee's is (only
work that fits beside a member goes there). When every member fits now (its nominated workers
first) it is placed there, whole, ahead of the rest of the pass.

No deadlock: nominations are made oldest starving execution first, and a worker guards one
nominee at most, so a gang is nominated only workers no older nominee holds, all of them or none
(a gang that would get fewer than ``size`` is not nominated and waits for the next pass). The
oldest starving gang's workers therefore only drain: nothing that does not fit beside its members
is placed there, and what runs there ends. Nominations hold no resources, so two gangs never
each hold part of what the other needs.

Cost: O(candidates × log candidates) per starving gang and pass (a sort per group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flux.matching.aging import Nomination, shortfall
from flux.matching.candidates import Placement
from flux.matching.filters import fits_now
from flux.matching.queue import Pending
from flux.matching.shape import Shape
from flux.matching.tenancy import Ledger
from flux.matching.view import Room


def pick(shape: Shape, rooms: Iterable[Room], key: Callable[[Room], Any]) -> list[Room] | None:
    """The ``size`` rooms of one ``same`` group (one per ``spread`` value) first by ``key``, from the
    group whose choice is smallest by ``key`` in all; None if no group has ``size``."""
    gang = shape.gang
    assert gang is not None
    groups: dict[str, list[Room]] = {}
    for room in rooms:
        labels = room.view.labels
        value = labels.get(gang.same) if gang.same else ""
        if value is None or (gang.spread and gang.spread not in labels):
            continue
        groups.setdefault(value, []).append(room)
    best: tuple[Any, list[Room]] | None = None
    for value, members in groups.items():
        if len(members) < gang.size:
            continue
        members.sort(key=key)
        chosen: list[Room] = []
        seen: set[str] = set()
        for room in members:
            distinct = room.view.labels[gang.spread] if gang.spread else room.view.name
            if distinct not in seen:
                seen.add(distinct)
                chosen.append(room)
                if len(chosen) == gang.size:
                    break
        if len(chosen) < gang.size:
            continue
        score = (sorted(key(room) for room in chosen), value)
        if best is None or score < best[0]:
            best = (score, chosen)
    return best[1] if best is not None else None


def fitting_now(
    shape: Shape, previous: Nomination | None, rooms: dict[str, Room], candidates: Iterable[str]
) -> list[Room] | None:
    """Where every member of a starving gang fits now: its nominated workers if they all do, else
    the least loaded that do (a worker guarded for an older nominee takes a member only beside it)."""
    if previous is not None and previous.members:
        own = [rooms[worker] for worker in previous.members if worker in rooms]
        if len(own) == len(previous.members) and all(fits_now(shape, room) for room in own):
            return own
    return pick(
        shape,
        (rooms[name] for name in candidates if fits_now(shape, rooms[name])),
        key=lambda room: room.key,
    )


def place_whole(item: Pending, chosen: list[Room], ledger: Ledger | None) -> Placement:
    """Take every member's room and return the gang's placement (its tenant charged once)."""
    shape = item.shape
    r = shape.requests
    members = tuple(
        (room.view.name, room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory)) for room in chosen
    )
    if ledger is not None:
        ledger.charge(shape.tenant, shape.demand)
    return Placement(item.execution_id, members[0][0], members[0][1], shape, members)


def nominate(
    item: Pending, previous: Nomination | None, free: Iterable[Room], now: float
) -> Nomination | None:
    """A worker per member with the least to free, all in one group (or None: too few free)."""
    shape = item.shape
    chosen = pick(shape, free, key=lambda room: shortfall(shape, room))
    if chosen is None:
        return None
    names = tuple(room.view.name for room in chosen)
    since = previous.nominated_at if previous is not None and set(previous.workers) == set(names) else now
    return Nomination(item.execution_id, names[0], shape, item.since, since, names)
