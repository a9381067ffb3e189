"""Moving what waits in a stalled worker's own queue to a worker with free room (``--prefetch``).

A pipelining worker's queue is kept short (``flux.matching.prefetch.queue_depth``), but it can
still stall: its room fills with bodies that turn long after many short ones. What has waited
there ``MOVE_AFTER`` or longer then goes to a worker with free room and nothing queued of its
own (``flux.matching.prefetch.moves`` decides which), as Dask's work stealing does: it is taken
back (its worker is told to drop it; ``requeued`` with reason ``moved``) and placed by the pass
that puts it back in line, in that free room.

Two triggers: each housekeeping step (``Mover.step``), and a worker that frees room and is then
idle (``Mover.soon``), so short bodies moved one room at a time follow each other without
waiting for the next step.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from flux.dispatcher.state.lifecycle import Requeue
from flux.matching.prefetch import MOVE_AFTER, Waiting, moves

if TYPE_CHECKING:
    from collections.abc import Callable

    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.domain.execution import Execution

    # housekeeping.take_back_queued, handed in: the housekeeper holds the mover.
    TakeBack = Callable[[Handle, Execution, str, Requeue], Execution]

log = logging.getLogger("flux.dispatcher")

# What the worker an execution is moved from is told (its Stop's reason).
MOVED_WHY = "moved to a worker with free room"
# Seconds between two looks when workers free room (``Mover.soon``).
MOVE_EVERY = 0.02


class Mover:
    def __init__(self, d: Handle, take_back: TakeBack):
        self.d = d
        self._take_back = take_back
        self.last_look = 0.0
        self._due: asyncio.TimerHandle | None = None  # the look ``soon`` scheduled, until it runs

    def step(self, now: float) -> int:
        """Each housekeeping step: every idle worker takes what it fits. How many moved."""
        self.last_look = now
        return move_waiting(self.d, now, self._take_back)

    def soon(self, entry: WorkerEntry) -> None:
        """``entry`` freed room: if it is now idle (free room, nothing queued), look soon rather than at
        the next step. One look at a time, at most every ``MOVE_EVERY`` (a look is O(workers holding a
        queue), and O(workers) when something there has waited long enough)."""
        if self._due is not None or entry.queued or not entry.dispatchable or entry.active >= entry.capacity:
            return
        if not self.d.registry.queuing:
            return
        delay = max(0.0, self.last_look + MOVE_EVERY - self.d.clock())
        self._due = asyncio.get_running_loop().call_later(delay, self._look)

    def cancel(self) -> None:
        """Drop the look ``soon`` scheduled (the dispatcher stops: nothing may move after)."""
        if self._due is not None:
            self._due.cancel()
            self._due = None

    def _look(self) -> None:
        self._due = None
        try:
            self.step(self.d.clock())
        except Exception:  # the next step looks again
            log.exception("moving queued executions failed")


def move_waiting(d: Handle, now: float, take_back: TakeBack) -> int:
    """Give workers with free room and nothing queued what has waited ``MOVE_AFTER`` or longer in
    another worker's queue (``flux.matching.prefetch.moves``): each is taken back (its worker is
    told to drop it) and placed by the pass that puts it back in line. How many moved.

    O(workers holding a queue) while none of theirs has waited that long, which is the common case;
    O(workers) otherwise.
    """
    queuing = d.registry.waiting_queues()
    if not queuing or d.usage.accounts is not None:
        return 0
    # A queue's first entry is its oldest (queued in order): only such a queue has anything to move.
    stale = [e for e in queuing if e.queued and now - next(iter(e.queued.values())).since >= MOVE_AFTER]
    if not stale:
        return 0
    nominated = d.aging.by_worker
    idle = [
        e.view()
        for e in d.registry.values()
        if e.dispatchable and not e.queued and e.name not in nominated and e.active < e.capacity
    ]
    if not idle:
        return 0
    waiting = []
    for e in stale:
        for execution_id, queued in e.queued.items():
            execution = d.table.get(execution_id)
            if execution is not None and now - queued.since >= MOVE_AFTER:
                waiting.append(Waiting(execution_id, e.name, d.catalogue.shape_of(execution), queued.since))
    moved = 0
    with d.passes.together():  # one pass for the queues that have a place again
        for execution_id, _ in moves(waiting, idle, now, d.feasibility):
            execution = d.table.get(execution_id)
            # Back in line once its row is saved, where the pass that puts it there finds the room.
            if execution is not None and take_back(d, execution, MOVED_WHY, Requeue.MOVED) is not execution:
                moved += 1
    return moved
