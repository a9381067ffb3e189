"""Queueing ahead at pipelining workers (``flux start worker --prefetch N``): which pending
executions go into which worker's own queue, beyond its room.

A worker that prefetches holds up to N executions beyond its room. Such an execution is
SCHEDULED on it without a reservation; the worker starts it when its own room allows and
claims it then, when the reservation is taken. So a queued execution need not fit the
worker's room now, only the worker itself: its permanent fit (labels, totals, packages,
runtime), the same verdict ``FeasibilityCache`` keeps for ordinary passes.

This pass runs after an ordinary one (``schedule``), over what that left pending. Order is the
queue's: highest priority first, FIFO within a priority, across shapes (a heap of shape heads,
as ``schedule`` does). Each execution goes to the capable worker with the most space left in its
queue (then the fewest queued, then name), so a burst spreads over the workers evenly. Never
queued ahead: GPU executions (the GPU indices are chosen at placement, and a queued execution
holds none), gangs (all members reserved in one decision, or none), and whatever ``eligible``
refuses (the dispatcher refuses executions that hold a flow budget: a concurrency, rate or named
limit's key).

How deep a worker's queue goes: ``--prefetch N`` is its most, and ``queue_depth`` keeps it to about
``QUEUE_SECONDS`` of that worker's recent bodies. A queue is there to hide the server's turnaround
(a result in, the next dispatches out: a few milliseconds); bodies of a second hide it with one
queued, and a deeper queue of them would only hold work at one worker while another frees room. A
flood of millisecond bodies gets all N, where the queue pays most: every result that carries a
claim and every dispatch that refills several saves a message.

A queue can still stall: its worker's room fills with bodies that turn long after many short
ones. ``moves`` lets a worker with free room and an empty queue of its own take what has waited in
another worker's queue longer than ``MOVE_AFTER``, as Dask's work stealing does: the dispatcher
takes it back (the worker is told to drop it) and the next pass places it in the free room.

Cost: O(shapes × workers with space + placements × (log shapes + workers with space)); the
queue is walked only as far as it places, plus the ineligible items it steps over.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from math import ceil

from flux.matching.candidates import FeasibilityCache, Placement
from flux.matching.filters import fits_now
from flux.matching.queue import Pending, PendingQueue
from flux.matching.shape import Shape
from flux.matching.view import Room, WorkerView

# Seconds of a worker's recent bodies its queue holds at most (``queue_depth``).
QUEUE_SECONDS = 0.05


def queue_depth(prefetch: int, body_s: float | None, running: int) -> int:
    """How many a worker may hold queued now: ``prefetch`` at most, and no more than its ``running``
    bodies get through in ``QUEUE_SECONDS`` when each takes ``body_s`` (its recent bodies, claim to
    result); all ``prefetch`` while it has none to go by. At least 1: one queued execution is what
    lets a body start the moment the one before it ends."""
    if prefetch <= 1 or not body_s or body_s <= 0:
        return prefetch
    return max(1, min(prefetch, ceil(QUEUE_SECONDS * max(1, running) / body_s)))


@dataclass(slots=True)
class QueueSpace:
    """A pipelining worker as this pass sees it: its view (for fit) and its queue's space."""

    view: WorkerView
    # Places left in its queue (prefetch minus what it holds queued).
    free: int
    # What it holds queued now: with equal space, the worker with the shorter queue goes first.
    queued: int = 0

    @property
    def key(self) -> tuple[int, int, str]:
        return (-self.free, self.queued, self.view.name)


def never_queued(shape: Shape) -> bool:
    """Shapes that are never queued ahead, whatever the worker: those that need GPUs, and gangs
    (every member must start together, on rooms reserved in one decision: ``flux.matching.gangs``)."""
    return shape.requests.gpu > 0 or shape.gang is not None


def queue_ahead(
    queue: PendingQueue,
    workers: Sequence[QueueSpace],
    *,
    shapes: Sequence[Shape] | None = None,
    cache: FeasibilityCache | None = None,
    eligible: Callable[[Pending], bool] = lambda item: True,
) -> list[Placement]:
    """Queue pending executions (of ``shapes``, else all) at ``workers`` while they have space.

    Reads ``queue`` and changes nothing; the caller removes what it places. Each placement has
    ``queued`` set and no GPU indices.
    """
    cache = cache if cache is not None else FeasibilityCache()
    spaces = [w for w in workers if w.free > 0]
    if not spaces or not len(queue):
        return []
    heads: list[tuple[tuple[int, int], int, Pending, Iterator[Pending], Shape, list[QueueSpace]]] = []
    for place, shape in enumerate(shapes if shapes is not None else queue.shapes()):
        if never_queued(shape):
            continue
        capable = [w for w in spaces if cache.permanent(shape, w.view) is None]
        if not capable:
            continue
        items = queue.iter_shape(shape)
        first = next(items, None)
        if first is not None:
            heads.append((first.order, place, first, items, shape, capable))
    heapq.heapify(heads)
    left = sum(w.free for w in spaces)
    placements: list[Placement] = []
    while heads and left:
        _, place, item, items, shape, capable = heapq.heappop(heads)
        if eligible(item):
            best = min((w for w in capable if w.free > 0), key=lambda w: w.key, default=None)
            if best is None:
                continue  # every capable worker's queue is full: this shape is done for the pass
            placements.append(Placement(item.execution_id, best.view.name, (), shape, queued=True))
            best.free -= 1
            best.queued += 1
            left -= 1
        following = next(items, None)
        if following is not None:
            heapq.heappush(heads, (following.order, place, following, items, shape, capable))
    return placements


# Seconds an execution waits in one worker's own queue before a worker with free room may take it:
# well above how long a queue of short bodies takes to turn over (``QUEUE_SECONDS``), so a burst's
# queues are never raided; well below a body that stalls a queue.
MOVE_AFTER = 0.5


@dataclass(frozen=True, slots=True)
class Waiting:
    """An execution in a worker's own queue, as ``moves`` sees it."""

    execution_id: str
    worker: str
    shape: Shape
    # When it was queued there.
    since: float


def moves(
    waiting: Sequence[Waiting], idle: Sequence[WorkerView], now: float, cache: FeasibilityCache | None = None
) -> list[tuple[str, str]]:
    """What the ``idle`` workers (free room, nothing in their own queue) take from other workers'
    queues: each execution queued ``MOVE_AFTER`` or longer, longest waiting first, into the first
    idle worker it fits (its permanent fit and its room now, counting what this call gave it
    already). ``(execution_id, worker)`` pairs; never GPU executions or gangs (never queued)."""
    cache = cache if cache is not None else FeasibilityCache()
    rooms = [Room(view) for view in idle]
    taken: list[tuple[str, str]] = []
    if not rooms:
        return taken
    for item in sorted(waiting, key=lambda w: w.since):
        if now - item.since < MOVE_AFTER:
            break  # the rest waited less
        for room in rooms:
            view = room.view
            if (
                view.name != item.worker
                and fits_now(item.shape, room)
                and cache.permanent(item.shape, view) is None
            ):
                r = item.shape.requests
                room.take(r.cpu, r.memory, r.disk, 0)
                taken.append((item.execution_id, view.name))
                break
    return taken
