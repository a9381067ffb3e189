"""One scheduling pass: place pending executions on workers, FIFO, least loaded first.

This is where every dispatch decision is made. It is pure: given the pending
queue and immutable worker views it returns placements and touches nothing.
The dispatcher commits them (reservations, store, push) afterwards.

How a pass runs (Nomad's feasibility-then-rank, adapted to a queue):
1. Workers are grouped by ``Profile``; each (shape, profile) pair is checked
   once for *permanent* fit (labels, totals, packages) and cached across passes.
2. The oldest head among all shapes is placed next (a heap of shape heads), so
   order is FIFO by submission across shapes.
3. A shape's candidates sit in a heap by load key. A candidate that cannot fit
   the shape now is dropped for the rest of the pass: space only shrinks
   within a pass. A shape whose head fits nowhere is done for the pass, so an
   unplaceable execution never blocks the ones behind it in other shapes.
4. Each placement is subtracted from the worker's ``Room`` before the next.

Cost is O(shapes × profiles + candidates + placements × log workers), never
proportional to the backlog.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from flux.matching.filters import fits_now, permanent_rejection
from flux.matching.queue import Pending, PendingQueue
from flux.matching.reasons import Rejection
from flux.matching.shape import Shape
from flux.matching.view import Profile, Room, WorkerView


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
    workers: Iterable[WorkerView],
    *,
    shapes: Sequence[Shape] | None = None,
    cache: FeasibilityCache | None = None,
    limit: int | None = None,
) -> list[Placement]:
    """Place as much of ``queue`` as fits on ``workers``; at most ``limit`` placements.

    ``shapes`` restricts the pass to those shapes (a new submission needs only
    its own); ``workers`` may be a subset (a worker that just freed space is
    the only one where something new can fit).
    """
    cache = cache if cache is not None else FeasibilityCache()
    by_profile: dict[Profile, list[WorkerView]] = {}
    for view in workers:
        by_profile.setdefault(view.profile, []).append(view)
    if not by_profile:
        return []

    rooms: dict[str, Room] = {}
    heads: list[tuple[int, int, Pending, Iterator[Pending], Shape, list[WorkerView]]] = []
    # Deduplicated: two heads over one shape's queue would place the same execution twice.
    for order, shape in enumerate(dict.fromkeys(shapes) if shapes is not None else queue.shapes()):
        items = queue.iter_shape(shape)
        first = next(items, None)
        if first is None:
            continue
        candidates = [
            view
            for views in by_profile.values()
            if cache.permanent(shape, views[0]) is None
            for view in views
        ]
        if candidates:
            heads.append((first.seq, order, first, items, shape, candidates))
    heapq.heapify(heads)

    placements: list[Placement] = []
    by_load: dict[int, list[tuple[tuple[float, float, str], Room]]] = {}
    while heads and (limit is None or len(placements) < limit):
        _, order, item, items, shape, candidates = heads[0]
        loads = by_load.get(order)
        if loads is None:
            loads = by_load[order] = _load_heap(candidates, rooms)
        room = _least_loaded_fit(loads, shape)
        if room is None:
            heapq.heappop(heads)
            continue
        requests = shape.requests
        gpus = room.take(requests.cpu, requests.memory, requests.disk, requests.gpu, requests.gpu_memory)
        placements.append(Placement(item.execution_id, room.view.name, gpus, shape))
        heapq.heappush(loads, (room.key, room))
        following = next(items, None)
        if following is None:
            heapq.heappop(heads)
        else:
            heapq.heapreplace(heads, (following.seq, order, following, items, shape, candidates))
    return placements


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


def _least_loaded_fit(loads: list[tuple[tuple[float, float, str], Room]], shape: Shape) -> Room | None:
    """Pop and return the least-loaded room that fits ``shape`` now, or None.

    Entries may be stale because another shape placed on the same worker. Load
    keys only grow within a pass, so a stale entry understates its key: when
    the top entry is current, it is the true minimum.
    """
    while loads:
        key, room = loads[0]
        if room.key is not key:
            heapq.heapreplace(loads, (room.key, room))
        elif fits_now(shape, room):
            heapq.heappop(loads)
            return room
        else:
            heapq.heappop(loads)
    return None
