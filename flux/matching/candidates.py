"""Which workers a pass tries for a shape, and in what order; and the ``Placement`` it yields.

A worker is a candidate for a shape when it passes the permanent checks
(``FeasibilityCache``, memoised per profile across passes); within a pass a
shape's candidates sit in a heap of ``Room`` by load key (``Loads``), the
least loaded taken first (``least_loaded_fit``). The pass that drives them
is ``flux.matching.scheduler``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from flux.matching.filters import fits_now, permanent_rejection
from flux.matching.queue import Pending
from flux.matching.reasons import Rejection
from flux.matching.shape import Shape
from flux.matching.view import Profile, Room, WorkerView

# A shape's head in a pass: (its order, the shape's place, the item, the rest, shape, candidates or None).
Head = tuple[tuple[int, int], int, Pending, Iterator[Pending] | None, Shape, list[WorkerView] | None]


@dataclass(frozen=True, slots=True)
class Placement:
    execution_id: str
    worker: str
    gpu_indices: tuple[int, ...]
    shape: Shape
    # A gang's members by rank, each (worker, GPU indices); rank 0 is ``worker``. Empty otherwise.
    members: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # Into the worker's own queue (``flux.matching.prefetch``), not its room: nothing is reserved.
    queued: bool = False


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


def room_of(rooms: dict[str, Room], view: WorkerView) -> Room:
    room = rooms.get(view.name)
    if room is None:
        room = rooms[view.name] = Room(view)
    return room


def load_heap(
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


class Loads:
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


def least_loaded_fit(loads: Loads, shape: Shape, rooms: dict[str, Room]) -> Room | None:
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
