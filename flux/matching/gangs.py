"""All or nothing: place every member of a gang in one decision, or none of them.

A gang shape (``Shape.gang``) asks for ``size`` members, each on its own worker, each fitting
the shape's requests. The pass finds all of them before it takes anything; when it cannot, it
takes nothing, so no partial gang ever holds resources, and two gangs cannot each hold half of
what they need (there is no deadlock to break: nothing is held while waiting).

Topology: ``same=LABEL`` groups the candidates by their value of that label and places the
whole gang inside one group, trying the groups best fit first (fewest candidates, then value),
so a big group stays whole for a big gang; ``spread=LABEL`` takes the least loaded fitting
worker of each value and keeps the ``size`` least loaded of those. Both: spread inside one
``same`` group. A worker without the label is never a member. Without topology the members are
the ``size`` fitting workers its placement policy picks first (``flux.matching.packing``: the
least loaded under spread, the fullest under binpack). A gang with a topology picks inside each
group by least load, whatever its policy (binpack's order is not kept per group); each member's
GPUs are then chosen as spread chooses them.

Cost per gang: O(size × log candidates) without topology or with ``same`` (plus one look at each
group found too small, which is then dropped for the pass: space only shrinks within a pass);
O(values × log candidates) with ``spread``. Grouping the candidates costs O(candidates) once
per shape per pass.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import chain

from flux.matching.candidates import FeasibilityCache, Loads, Placement, least_loaded_fit, load_heap
from flux.matching.index import FleetIndex
from flux.matching.packing import Packing, PackLoads, best_fit, open_loads, place_on
from flux.matching.shape import Shape
from flux.matching.view import Room, WorkerView


@dataclass(slots=True)
class _Group:
    """One value of the ``same`` label: its candidates by value of the ``spread`` label."""

    value: str
    by_spread: dict[str | None, Loads]
    count: int


class Topology:
    """A gang shape's candidates in one pass, grouped by its ``same`` and ``spread`` labels."""

    __slots__ = ("base", "groups")

    def __init__(self, base: Loads):
        self.base = base
        self.groups: list[_Group] | None = None

    def _build(self, shape: Shape, rooms: dict[str, Room]) -> list[_Group]:
        gang = shape.gang
        assert gang is not None
        # Rooms already built stay rooms (a heap each group re-heapifies); views still unpulled
        # stay views, walked lazily by load key as the index yields them (already in key order),
        # so grouping a large fleet builds no room it does not try.
        built: dict[str, dict[str | None, list[tuple[tuple[float, float, str], Room]]]] = {}
        walked: dict[str, dict[str | None, list[tuple[tuple[float, float, str], WorkerView]]]] = {}
        counts: dict[str, int] = {}

        def file(view: WorkerView) -> tuple[str, str | None] | None:
            labels = view.labels
            same = labels.get(gang.same) if gang.same else ""
            spread = labels.get(gang.spread) if gang.spread else None
            if same is None or (gang.spread and spread is None):
                return None
            counts[same] = counts.get(same, 0) + 1
            return same, spread

        for key, room in self.base.heap:
            where = file(room.view)
            if where is not None:
                built.setdefault(where[0], {}).setdefault(where[1], []).append((key, room))
        if self.base.upcoming is not None:
            assert self.base.source is not None
            for key, view in chain((self.base.upcoming,), self.base.source):
                where = file(view)
                if where is not None:
                    walked.setdefault(where[0], {}).setdefault(where[1], []).append((key, view))
        self.base.heap, self.base.upcoming = [], None
        groups = []
        for value, count in counts.items():
            heaps, sources = built.get(value, {}), walked.get(value, {})
            by_spread = {}
            for spread in heaps.keys() | sources.keys():
                heap = heaps.get(spread, [])
                heapq.heapify(heap)
                by_spread[spread] = Loads(heap, iter(sources[spread]) if spread in sources else None)
            groups.append(_Group(value, by_spread, count))
        groups.sort(key=lambda g: (g.count, g.value))
        return groups

    def fit(self, shape: Shape, rooms: dict[str, Room]) -> list[tuple[Room, Loads]] | None:
        if self.groups is None:
            self.groups = self._build(shape, rooms)
        gang = shape.gang
        assert gang is not None
        kept: list[_Group] = []
        found = None
        for position, group in enumerate(self.groups):
            found = _pick(group.by_spread, shape, rooms, gang.size, bool(gang.spread))
            if found is not None:
                kept.extend(self.groups[position:])
                break
            # Too small now, so for the rest of the pass: space only shrinks within a pass.
        self.groups = kept
        return found


def _pull(loads: Loads, shape: Shape, rooms: dict[str, Room], size: int) -> list[tuple[Room, Loads]] | None:
    """The ``size`` rooms of ``loads`` that its policy picks first and fit ``shape`` now, popped;
    or None (none popped). A binpack heap may hold one room twice: a room already chosen is skipped."""
    found: list[tuple[Room, Loads]] = []
    names: set[str] = set()
    while len(found) < size:
        room = best_fit(loads, shape, rooms)
        if room is None:
            _put_back(found)
            return None
        if room.view.name not in names:
            names.add(room.view.name)
            found.append((room, loads))
    return found


def _pick(
    by_spread: dict[str | None, Loads], shape: Shape, rooms: dict[str, Room], size: int, spread: bool
) -> list[tuple[Room, Loads]] | None:
    if not spread:
        return _pull(by_spread[None], shape, rooms, size)
    if len(by_spread) < size:
        return None
    best: list[tuple[tuple[float, float, str], Room, Loads]] = []
    for loads in by_spread.values():
        room = least_loaded_fit(loads, shape, rooms)
        if room is not None:
            best.append((room.key, room, loads))
    best.sort(key=lambda entry: entry[0])
    _put_back([(room, loads) for _, room, loads in best[size:]])
    if len(best) < size:
        _put_back([(room, loads) for _, room, loads in best])
        return None
    return [(room, loads) for _, room, loads in best[:size]]


def _put_back(found: list[tuple[Room, Loads]]) -> None:
    for room, loads in found:
        if isinstance(loads, PackLoads):
            heapq.heappush(loads.heap, (room.pack_key(), next(loads.ties), room))  # type: ignore[arg-type]
        else:
            heapq.heappush(loads.heap, (room.key, room))


def open_gang_loads(
    shape: Shape,
    candidates: list[WorkerView] | None,
    index: FleetIndex | None,
    cache: FeasibilityCache,
    rooms: dict[str, Room],
    packing: Packing,
) -> Loads | Topology:
    """What a pass keeps for ``shape``'s candidates: its policy's (``open_loads``), or, for a gang
    with a topology, the least loaded first, grouped."""
    gang = shape.gang
    if gang is None or not (gang.same or gang.spread):
        return open_loads(shape, candidates, index, cache, rooms, packing)
    if candidates is None:
        assert index is not None
        return Topology(Loads([], index.candidates(shape, cache.permanent)))
    return Topology(Loads(load_heap(candidates, rooms)))


def place(
    execution_id: str, shape: Shape, loads: Loads | Topology, rooms: dict[str, Room], packing: Packing
) -> Placement | None:
    """Place one execution of ``shape`` (every member of a gang, or nothing) and take its room."""
    gang = shape.gang
    if isinstance(loads, Topology):
        chosen = loads.fit(shape, rooms)
    else:
        chosen = _pull(loads, shape, rooms, 1 if gang is None else gang.size)
    if chosen is None:
        return None
    members = tuple((room.view.name, place_on(where, room, shape, packing)) for room, where in chosen)
    worker, gpus = members[0]
    return Placement(execution_id, worker, gpus, shape, members if gang is not None else ())


def exhausted(loads: Loads | Topology) -> bool:
    """No candidate left for the rest of the pass (a gang's grouping: no group left)."""
    if isinstance(loads, Topology):
        return loads.groups is not None and not loads.groups
    return not loads.heap and loads.upcoming is None
