"""Recovery at start, requeueing, and the housekeeping tick: expired acks, lost workers, keepalives, safety pass."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from flux.dispatcher.state import pings
from flux.dispatcher.state.deadlines import Kind
from flux.dispatcher.state.lifecycle import Requeue
from flux.dispatcher.state.registry import placeholder
from flux.dispatcher.state.session import Stop
from flux.dispatcher.transitions import attempts, gangs, submission
from flux.dispatcher.transitions.attempts import requeue_saved
from flux.dispatcher.transitions.moving import Mover
from flux.domain.execution import Execution, ExecutionError, State
from flux.domain.policy import WORKER_LOST
from flux.store import Recovered

if TYPE_CHECKING:
    from collections.abc import Callable

    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.matching import Shape

log = logging.getLogger("flux.dispatcher")


async def recover(d: Handle, recovered: Recovered) -> None:
    """Resume from what the store kept: running work waits for its worker, the rest is queued again."""
    for record in recovered.workflows:
        d.catalogue.learn(record)
    tokens = {w.name: w.session_token for w in recovered.workers}
    now = d.clock()
    pending = []
    for execution in recovered.unfinished:
        if execution.state is State.RUNNING:
            # Running work waits for its worker's grace period, as if its stream had just dropped;
            # a gang for each member's worker that has not completed. (A gang only some members had
            # claimed goes back in line below: their workers, told what they hold, drop it.)
            done = dict(execution.gang.outputs) if execution.gang is not None else {}
            members = (
                [(w, g) for rank, (w, _, g) in enumerate(execution.gang.members) if rank not in done]
                if execution.gang is not None
                else [(execution.worker, execution.gpu_indices)]
            )
            # In the table before it is held: holding it charges its flow budgets, read from the row
            # there (a key's slot taken before its worker is back, or pending work would take it).
            d.table.add(execution)
            for worker, gpus in members:
                entry = d.registry.get(worker)
                if entry is None:
                    entry = d.registry.entries[worker] = placeholder(worker, tokens.get(worker, ""), now)
                entry.hold(execution.execution_id, d.catalogue.record_of(execution).requests, gpus)
            d.timing.recovered(execution)
            continue
        if execution.state is State.SCHEDULED:
            # An unclaimed dispatch from before the restart returns to CREATED. One server
            # writes one only for a run queued before its row (``written_later``) that was still
            # unclaimed when its receipt was due, or with rows of versions that stored dispatches.
            execution = gangs.reset(
                execution.evolve(state=State.CREATED, worker="", gpu_indices=(), updated_at=now)
            )
        # One server does not write dispatches, so one from before the restart may have used
        # generation + 1 (never more: requeue_saved); skip past it so fencing never sees a
        # generation twice. The binder makes the skip durable before anything is dispatched.
        pending.append(execution.evolve(generation=execution.generation + 1))
    await d.binder.recovered(pending)
    for execution in pending:
        execution = d.table.add(execution)
        d.queue_up(execution, d.catalogue.shape_of(execution))  # after its stored not-before time
        d.timing.recovered(execution)
    log.info(
        "recovered %d workflows, %d unfinished executions (%d queued)",
        len(d.catalogue), len(d.table), len(d.queue),
    )  # fmt: skip


def requeue(
    d: Handle,
    execution: Execution,
    entry: WorkerEntry | None,
    next_attempt: bool,
    landed: Callable[[], None] | None = None,
) -> Execution:
    """Back to CREATED (keeping its place in line), or FAILED when out of attempts.

    ``next_attempt``: a running attempt was lost with its worker; it ends as any attempt does
    (transitions/attempts.py: recorded, retried at once while attempts remain, else FAILED
    with reason ``worker_lost``). Otherwise it never ran (a dispatch not claimed, a release).
    """
    if next_attempt:
        error = ExecutionError(
            "WorkerLost",
            f"worker {execution.worker} was lost while running attempt {execution.attempt} "
            f"of {execution.max_attempts}",
        )
        return attempts.ended(d, execution, entry, WORKER_LOST, error)
    if entry is not None:
        entry.release(execution.execution_id)
    if execution.gang is not None:
        d.passes.room_freed(gangs.stop_all(d, execution, "a gang member's dispatch ended"))
    now = d.clock()
    requeued = execution.evolve(
        state=State.CREATED,
        worker="",
        gpu_indices=(),
        updated_at=now,
        started_at=0.0,
        gang=gangs.reset(execution).gang,
    )
    if len(requeued.input_json) > d.settings.inline_input_bytes:
        requeued = requeued.evolve(input_json="")  # back to waiting: its input waits in the store
    d.table.update(requeued)
    requeue_saved(d, requeued, landed)
    return requeued


def lose_worker(d: Handle, entry: WorkerEntry, why: str) -> list[Shape]:
    """Requeue (or fail) everything the worker holds; return the shapes put back in the queue."""
    if entry.ever_connected or entry.holdings:
        log.warning("worker %s lost (%s); requeueing %d executions", entry.name, why, len(entry.holdings))
    else:  # registered, never opened its stream: nothing was lost
        log.info("worker %s registered but never connected (%s); forgotten", entry.name, why)
    d.binder.worker_lost(entry)
    shapes: dict[Shape, None] = dict.fromkeys(requeue_queued(d, entry, "worker lost"))
    for execution_id in list(entry.holdings):
        execution = d.table.get(execution_id)
        if execution is None:
            entry.release(execution_id)
            continue
        if d.reclaimer.is_stopping(execution):  # preempted: its attempt does not count
            requeued = d.reclaimer.stopped(execution)
        elif d.timing.is_stopping(execution):  # timed out and lost before it was handed back
            requeued = d.timing.stopped(execution)
        else:
            # A dispatch never claimed did not run: same attempt. Running work did.
            requeued = requeue(d, execution, entry, next_attempt=gangs.ran(execution))
            d.events.requeued(execution, requeued, Requeue.WORKER_LOST)
        if requeued.state is State.CREATED:
            shapes[d.catalogue.shape_of(requeued)] = None
    d.registry.remove(entry)
    return list(shapes)


def forget_worker(d: Handle, name: str) -> int:
    """An operator forgets a worker on this server: what it held goes back in line; how many."""
    entry = d.registry.detach(name)
    held = len(entry.holdings)
    d.passes.work_added(lose_worker(d, entry, "forgotten by an operator"))
    return held


def requeue_unread(d: Handle, entry: WorkerEntry) -> list[Shape]:
    """Requeue now what a worker holds unclaimed: its stream was cut for falling behind.

    The events it had not read were dropped with the stream, so waiting for the ack
    deadline would only delay work that may never have reached it. A dispatch it did read
    and claims after all is refused (it is no longer on that worker, or under a newer
    generation) and the worker drops it. Claimed work stays: it runs, and the grace period
    covers a worker that does not come back.
    """
    shapes: dict[Shape, None] = {}
    count = 0
    for execution_id in list(entry.holdings):
        execution = d.table.get(execution_id)
        if execution is None or execution.state is not State.SCHEDULED or execution.worker != entry.name:
            continue  # claimed (running), or a claim of the database still in flight (a replica's binder)
        requeued = requeue(d, execution, entry, next_attempt=False)
        d.events.requeued(execution, requeued, Requeue.STREAM_OVERFLOWED)
        count += 1
        if requeued.state is State.CREATED:
            shapes[d.catalogue.shape_of(requeued)] = None
    if count:
        log.warning("requeued %d unclaimed dispatches of worker %s at once", count, entry.name)
    return list(shapes)


def requeue_queued(d: Handle, entry: WorkerEntry, why: str) -> list[Shape]:
    """Take back at once what a worker holds in its own queue (``--prefetch``): its stream is gone,
    it drains or it is lost. Nothing of it ran (a queued execution runs only once claimed), so it
    goes back in line as it was; a claim of one that comes later is refused (it is no longer there).
    """
    shapes: dict[Shape, None] = {}
    for execution_id in list(entry.queued):
        execution = d.table.get(execution_id)
        if execution is None or execution.state is not State.SCHEDULED or execution.worker != entry.name:
            entry.release(execution_id)
            continue
        requeued = requeue(d, execution, entry, next_attempt=False)
        d.events.requeued(execution, requeued, Requeue.RELEASED)
        if requeued.state is State.CREATED:
            shapes[d.catalogue.shape_of(requeued)] = None
    if shapes:
        log.info("worker %s: its queued executions go back in line (%s)", entry.name, why)
    return list(shapes)


def take_back_queued(
    d: Handle, execution: Execution, why: str, reason: Requeue = Requeue.RELEASED
) -> Execution:
    """Back to CREATED if it waits in its worker's own queue (the worker is told to drop it);
    as it is otherwise."""
    entry = d.registry.get(execution.worker) if execution.worker else None
    if entry is None or execution.execution_id not in entry.queued:
        return execution
    if entry.session is not None:
        entry.session.push(Stop(execution.execution_id, execution.generation, why))
    requeued = requeue(d, execution, entry, next_attempt=False)
    d.events.requeued(execution, requeued, reason)
    d.passes.room_freed([entry])  # its queue has a place again
    return requeued


def fire_timers(d: Handle, now: float) -> bool:
    """Act on every timer due by ``now`` (state/deadlines.py); whether a pass is due."""
    changed = False
    for kind, execution_id, token in d.timers.due(now):
        if kind is Kind.ACK:
            changed |= _ack_expired(d, execution_id, token)
        elif kind is Kind.INFEASIBLE:
            changed |= d.infeasibility.fire(token)
        elif kind is Kind.FLOW:
            d.flow.refill(execution_id, token)  # what it admits asks for its own pass
        else:
            changed |= d.timing.fire(kind, execution_id, token, now)
    return changed


def timers_due(d: Handle, now: float) -> None:
    """The timers' own wake-up (between ticks): fire what is due, and a pass when that freed room."""
    if fire_timers(d, now):
        d.passes.everything()


def _ack_expired(d: Handle, execution_id: str, generation: int) -> bool:
    """A dispatch past its ack deadline goes back in line (if it is still that dispatch)."""
    execution = d.table.get(execution_id)
    if execution is None or execution.state is not State.SCHEDULED or execution.generation != generation:
        return False
    entry = d.registry.get(execution.worker)
    log.warning("execution %s not claimed by %s within the ack deadline", execution_id, execution.worker)
    if entry is not None and entry.session is not None:
        entry.session.push(Stop(execution_id, generation, "ack deadline expired"))
    d.events.expired(execution)
    requeue(d, execution, entry, next_attempt=False)
    return True


def expire(d: Handle, now: float) -> bool:
    """Act on the timers due (ack deadlines and the rest) and lose workers past their grace period."""
    changed = fire_timers(d, now)
    grace = d.settings.grace_period
    for entry in list(d.registry.values()):
        if entry.disconnected_at is not None and now - entry.disconnected_at >= grace:
            lose_worker(d, entry, f"no stream for {grace:g}s")
            changed = True
    return changed


def keep_alive(d: Handle, now: float) -> None:
    """A worker whose stream is open counts as seen now, not at its last call (pings: ``d.pinger``)."""
    for entry in d.registry.values():
        if entry.session is not None:
            entry.last_seen = now


class Housekeeper:
    """The dispatcher's periodic tick, as one task."""

    def __init__(self, d: Handle):
        self.d = d
        self.last_full_pass = 0.0
        self.last_save_retry = 0.0
        # What waits in stalled worker queues, moved to idle workers: each step, and between steps.
        self.mover = Mover(d, take_back_queued)
        self.task: asyncio.Task[None] | None = None
        self.ping_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.task = loop.create_task(self._run())
        self.ping_task = loop.create_task(self._ping())

    async def stop(self) -> None:
        self.mover.cancel()
        for task in (self.task, self.ping_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def tick(self, now: float) -> None:
        d, s = self.d, self.d.settings
        expired = expire(d, now)
        if d.reclaimer.expire(now) or expired or now - self.last_full_pass >= s.safety_tick:
            self.last_full_pass = now
            d.passes.everything()
            d.infeasibility.changed()  # a change on another replica, or pools re-read
            if d.events.traces is not None:
                submission.trace_verdicts(d)
        # After a pass: what is still pending does not fit, so what it reclaims is needed.
        d.reclaimer.reclaim()
        self.mover.step(now)
        if d.table.unsaved and now - self.last_save_retry >= s.safety_tick:
            self.last_save_retry = now
            log.info("writing %d executions whose last store write failed again", d.table.save_unsaved())
        keep_alive(d, now)
        d.freezer.tick()

    async def _run(self) -> None:
        s = self.d.settings
        step = max(0.05, min(1.0, s.ack_deadline / 4, s.grace_period / 4, s.safety_tick))
        while True:
            await asyncio.sleep(step)
            try:
                self.tick(self.d.clock())
            except Exception:  # one bad tick must not stop the next one
                log.exception("dispatcher housekeeping failed")

    async def _ping(self) -> None:
        pinger = self.d.pinger
        while True:
            await asyncio.sleep(pings.STEP)
            try:
                now, wall = time.monotonic(), self.d.clock()
                # A turn's writers run in the next loop step, beside what else came in (pings.TURN).
                while pinger.ping_due(now, wall, pings.TURN) == pings.TURN:
                    await asyncio.sleep(0)
            except Exception:
                log.exception("dispatcher keepalive pings failed")
