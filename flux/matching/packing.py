"""A shape's candidates in a pass, in its placement policy's order, and taking a room from them.

``open_loads`` opens them: spread's ``Loads`` (least loaded first, ``least_loaded_fit``) or
binpack's ``PackLoads`` (fullest that fits first, ``tightest_fit``; see
``flux.matching.placement``). ``best_fit`` picks a room, ``place_on`` takes the shape from it.
The scheduler and the fair-share loop call these three and nothing policy-specific.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from itertools import count

from flux.matching.candidates import FeasibilityCache, Loads, least_loaded_fit, load_heap, room_of
from flux.matching.filters import fits_now
from flux.matching.index import FleetIndex
from flux.matching.placement import BINPACK, DEFAULT_PLACEMENT, PackKey, effective
from flux.matching.reasons import Rejection
from flux.matching.shape import Shape
from flux.matching.view import Room, WorkerView


class Packing:
    """A pass's placement state: the server's default policy, and the rooms taken so far.

    Spread's load keys only grow within a pass, so a stale heap entry understates its room and
    is re-keyed when it surfaces. Binpack's keys only shrink (a room taken gets fuller), so an
    entry may overstate: every room taken is noted here, and each open ``PackLoads`` files it
    again under its new key before its next choice (``tightest_fit``).
    """

    __slots__ = ("default", "taken")

    def __init__(self, default: str = DEFAULT_PLACEMENT):
        self.default = default
        self.taken: list[Room] = []

    def packs(self, shape: Shape) -> bool:
        return effective(shape.placement, self.default) == BINPACK


class PackLoads(Loads):
    """A binpack shape's candidates in a pass: rooms by pack key, fullest first.

    Its heap entries are (key, tie, room): a room taken earlier in the pass may be filed twice
    under one key (again from ``Packing.taken``, and from the index's walk), and rooms never compare.
    """

    __slots__ = ("packing", "seen", "shape", "permanent", "ties")

    def __init__(
        self,
        heap: list[tuple[PackKey, int, Room]],
        source: Iterator[tuple[PackKey, WorkerView]] | None,
        packing: Packing,
        shape: Shape,
        permanent: Callable[[Shape, WorkerView], Rejection | None],
    ):
        super().__init__(heap, source)  # type: ignore[arg-type]
        self.packing = packing
        self.shape = shape
        self.permanent = permanent
        self.ties = count(len(heap))
        # Rooms taken before a list's heap was built are in it under their current keys already;
        # an index's walk files them under their keys from before the pass.
        self.seen = len(packing.taken) if source is None else 0


def open_loads(
    shape: Shape,
    candidates: list[WorkerView] | None,
    index: FleetIndex | None,
    cache: FeasibilityCache,
    rooms: dict[str, Room],
    packing: Packing,
) -> Loads:
    """``shape``'s candidates for this pass, in its policy's order (over ``index`` when no list)."""
    if not packing.packs(shape):
        if candidates is None:
            assert index is not None
            return Loads([], index.candidates(shape, cache.permanent))
        return Loads(load_heap(candidates, rooms))
    if candidates is None:
        assert index is not None
        return PackLoads([], index.packed_candidates(shape, cache.permanent), packing, shape, cache.permanent)
    heap = [(room_of(rooms, view).pack_key(), tie, rooms[view.name]) for tie, view in enumerate(candidates)]
    heapq.heapify(heap)
    return PackLoads(heap, None, packing, shape, cache.permanent)


def best_fit(loads: Loads, shape: Shape, rooms: dict[str, Room]) -> Room | None:
    """The room ``loads``' policy picks for ``shape`` now (popped from its heap), or None."""
    if isinstance(loads, PackLoads):
        return tightest_fit(loads, shape, rooms)
    return least_loaded_fit(loads, shape, rooms)


def place_on(loads: Loads, room: Room, shape: Shape, packing: Packing) -> tuple[int, ...]:
    """Take ``shape`` from ``room`` (chosen by ``best_fit``) and file it again; the GPUs assigned."""
    r = shape.requests
    # Its pack key shrinks: every open PackLoads (this one too) files it again from there.
    packing.taken.append(room)
    if isinstance(loads, PackLoads):
        return room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory, pack=True)
    gpus = room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory)
    heapq.heappush(loads.heap, (room.key, room))
    return gpus


def tightest_fit(loads: PackLoads, shape: Shape, rooms: dict[str, Room]) -> Room | None:
    """Pop and return the fullest room (least pack key) that fits ``shape`` now, or None.

    Rooms taken since the last call are filed again under their (smaller) keys first; an
    entry whose key is no longer its room's is then a leftover and dropped. A worker not yet
    pulled from the index's walk and not taken in this pass has exactly the key it was filed
    under, so, as for spread, the heap's top is decided on once the walk's next key is above it.
    A room that does not fit is dropped for the pass: space only shrinks within a pass.
    """
    heap: list[tuple[PackKey, int, Room]] = loads.heap  # type: ignore[assignment]
    taken = loads.packing.taken
    ties = loads.ties
    if loads.seen < len(taken):
        for room in taken[loads.seen :]:
            if loads.permanent(loads.shape, room.view) is None:
                heapq.heappush(heap, (room.pack_key(), next(ties), room))
        loads.seen = len(taken)
    while True:
        if heap:
            key, _, room = heap[0]
            if room.pack_key() is not key:
                heapq.heappop(heap)
                continue
        upcoming = loads.upcoming
        if upcoming is not None and (not heap or upcoming[0] < heap[0][0]):
            assert loads.source is not None
            loads.upcoming = next(loads.source, None)
            room = room_of(rooms, upcoming[1])
            heapq.heappush(heap, (room.pack_key(), next(ties), room))
            continue
        if not heap:
            return None
        room = heapq.heappop(heap)[2]
        if fits_now(shape, room):
            return room
