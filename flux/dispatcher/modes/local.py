"""Where one server and replicas sharing PostgreSQL differ: three small injected strategies.

In the spirit of the Kubernetes scheduler's Reserve → Bind (Unreserve on failure):

- ``Binder``: turns reserved placements into dispatches. On one server a
  placement is this server's at once; replicas claim it in the database first
  and unreserve on a miss (shared/binder.py).
- ``PendingFeed``: where pending work comes from besides this server's own
  submissions. One server: nowhere. Replicas: the NOTIFY mirror plus resync.
- ``FleetDirectory``: which workers exist. One server: its own. Replicas: its
  own plus those the database directory lists for the others. ``explain`` and
  ``status`` both read it, so they count the same fleet.

Their protocols are in ``handle.py``; the local strategies are here, the shared ones in
``shared/binder.py``, ``shared/feed.py`` and ``shared/fleet.py`` (``shared/replica.py`` builds them).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from flux.dispatcher.cycle.placing import scheduled_row
from flux.dispatcher.handle import Bound, Modes, Outcome
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.dispatcher.transitions import attempts, cancel, housekeeping, submission
from flux.domain.execution import Execution, ExecutionError
from flux.errors import NotFound, Unavailable

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.registry import WorkerRegistration
    from flux.matching import Placement


# ----------------------------------------------------------------- one server


class LocalBinder:
    """One server owns every execution: a placement is bound the moment it is reserved."""

    d: Handle
    # Each submission whose row is being written, in the order saved: (execution, its write).
    _writing: dict[str, tuple[Execution, asyncio.Future[None]]]

    def attach(self, d: Handle) -> None:
        self.d = d
        self._writing = {}

    async def submit(self, execution: Execution) -> None:
        """Store a submission (durable before we answer), then queue it and try to place it.

        The queueing hangs on the write itself, not on the caller: a caller that goes away
        meanwhile (its RPC cut) must not leave the row stored and never queued.
        """
        written = self.d.store.save(execution)
        self._writing[execution.execution_id] = (execution, written)
        written.add_done_callback(functools.partial(self._stored, execution.execution_id))
        try:
            await asyncio.shield(written)
        except Exception as exc:
            raise Unavailable(f"could not store the execution: {exc}") from exc

    def _stored(self, execution_id: str, _: asyncio.Future[None]) -> None:
        """Queue every submission whose write has landed, in one block: one pass for them all.

        A commit resolves its whole batch before any of its callbacks runs, and commits land in
        the order rows were saved. So the first callback of a batch finds the batch's writes done
        at the head of ``_writing`` and queues them all, in the same turn of the loop as one
        callback each did (a submission is still placed before its call returns); the others
        find theirs gone. A burst of one-by-one calls gets a pass per commit, not per call.
        """
        writing = self._writing
        if execution_id not in writing:
            return
        done = []
        for queued_id, (_, future) in writing.items():
            if not future.done():
                break
            done.append(queued_id)
        if execution_id not in done:  # landed behind a write still in flight: not with one commit at a time
            done.append(execution_id)
        landed = []
        for queued_id in done:
            execution, future = writing.pop(queued_id)
            if not future.cancelled() and future.exception() is None:
                self.d.events.submitted(execution)
                landed.append(execution)
        if landed:
            submission.enqueue_all(self.d, landed)

    def queue_unwritten(self, execution: Execution) -> bool:
        # One server: nobody else can see or take it before its row is written.
        self.d.table.unwritten.add(execution.execution_id)
        self.d.events.submitted(execution)
        submission.enqueue(self.d, execution)
        return True

    async def submit_many(self, executions: list[Execution]) -> None:
        await submission.store_and_queue(self.d, executions)

    def bind(self, placements: list[Placement]) -> list[Bound]:
        # Not written to the store: after a restart an unclaimed dispatch goes back to
        # CREATED anyway, so the row stays CREATED until the claim.
        unfinished, now = self.d.table.unfinished, self.d.clock()
        return [
            Bound(p, Outcome.BOUND, scheduled_row(unfinished[p.execution_id], p, now)) for p in placements
        ]

    def place_released(self, execution: Execution) -> bool:
        return False  # a dispatch is not stored here: queued once its release is committed, placed then

    async def recovered(self, pending: list[Execution]) -> None:
        # Their generations were bumped past an unwritten dispatch (housekeeping.recover): store
        # that before any is dispatched, or a second restart would bump from the old value again.
        try:
            await asyncio.gather(*(self.d.store.save(execution) for execution in pending))
        except Exception as exc:
            raise Unavailable(f"could not store the recovered executions: {exc}") from exc

    def worker_lost(self, entry: WorkerEntry) -> None:
        pass  # nothing is in flight: binding is synchronous

    async def cancel(self, execution_id: str) -> Execution:
        return await cancel.cancel_here(self.d, execution_id)

    async def cancel_many(self, execution_ids: list[str]) -> None:
        await cancel.cancel_many_here(self.d, execution_ids)

    def fail_waiting(self, execution: Execution, error: ExecutionError) -> None:
        attempts.fail_here(self.d, execution, error)  # nobody else decides it

    def quotas(self, governed: bool) -> None:
        pass  # one server holds all usage: the scheduler's own check is exact

    def preempt(self, preemptor: str, act: Callable[[], None]) -> None:
        act()  # nobody else plans


class NoFeed:
    """One server: all pending work is its own."""

    changes_pushed = True

    def attach(self, d: Handle) -> None:
        pass

    async def before_start(self) -> None:
        pass

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def next_seq(self, next_seq: int) -> int:
        return next_seq

    def authoritative(self, execution: Execution) -> bool:
        return True

    async def learn_workflows(self) -> None:
        pass

    async def next_change(
        self, execution_id: str, updates: asyncio.Queue[Execution], current: Execution
    ) -> Execution:
        return await updates.get()


class LocalFleet:
    """The workers registered with this server are the whole fleet."""

    d: Handle

    def attach(self, d: Handle) -> None:
        self.d = d

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def serving(self, address: str) -> None:
        pass

    async def entries(self) -> list[WorkerEntry]:
        return self.d.registry.sorted()

    async def before_register(self, registration: WorkerRegistration) -> None:
        pass

    async def registered(self, name: str) -> None:
        pass

    def connected(self, entry: WorkerEntry) -> None:
        pass

    def disconnected(self, entry: WorkerEntry) -> None:
        pass

    async def forget(self, name: str) -> int:
        return housekeeping.forget_worker(self.d, name)

    async def set_paused(self, name: str, paused: bool) -> WorkerEntry:
        entry = self.d.registry.get(name)
        if entry is None:
            raise NotFound(f"worker {name!r} is not known; 'flux workers list' shows the fleet")
        self.d.registry.pause(entry, paused)
        return entry


def local() -> Modes:
    return Modes(LocalBinder(), NoFeed(), LocalFleet())
