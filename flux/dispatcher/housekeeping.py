"""Recovery at start, and the housekeeping tick: expired acks, lost workers, keepalives, safety pass."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from flux.dispatcher.registry import placeholder
from flux.dispatcher.session import Cancelled, Ping
from flux.domain.execution import State
from flux.store.base import Recovered

if TYPE_CHECKING:
    from flux.dispatcher.core import Dispatcher

log = logging.getLogger("flux.dispatcher")


def recover(d: Dispatcher, recovered: Recovered) -> None:
    """Resume from what the store kept: running work waits for its worker, the rest is queued again."""
    for record in recovered.workflows:
        d.catalogue.learn(record)
    tokens = {w.name: w.session_token for w in recovered.workers}
    now = d.clock()
    for execution in recovered.unfinished:
        if execution.state is State.RUNNING:
            # Running work waits for its worker's grace period, as if its stream had just dropped.
            entry = d.registry.get(execution.worker)
            if entry is None:
                entry = d.registry.entries[execution.worker] = placeholder(
                    execution.worker, tokens.get(execution.worker, ""), now
                )
            entry.hold(
                execution.execution_id, d.catalogue.record_of(execution).requests, execution.gpu_indices
            )
            d.table.add(execution)
            continue
        if execution.state is State.SCHEDULED:
            # An unclaimed dispatch from before the restart returns to CREATED. Reached only
            # with rows written by versions that stored dispatches; this one does not.
            execution = execution.evolve(state=State.CREATED, worker="", gpu_indices=(), updated_at=now)
            d.table.save(execution)
        # Dispatches are not written, so one from before the restart may have used
        # generation + 1; skip past it so fencing never sees a generation twice.
        execution = d.table.add(execution.evolve(generation=execution.generation + 1))
        d.queue.add(execution.execution_id, d.catalogue.shape_of(execution), execution.seq)
    log.info(
        "recovered %d workflows, %d unfinished executions (%d queued)",
        len(d.catalogue), len(d.table), len(d.queue),
    )  # fmt: skip


def expire(d: Dispatcher, now: float) -> bool:
    """Requeue dispatches past their ack deadline and the work of workers past their grace period."""
    changed = False
    for execution_id, generation in d.deadlines.due(now):
        execution = d.table.get(execution_id)
        if execution is None or execution.state is not State.SCHEDULED or execution.generation != generation:
            continue
        entry = d.registry.get(execution.worker)
        log.warning("execution %s not claimed by %s within the ack deadline", execution_id, execution.worker)
        if entry is not None and entry.session is not None:
            entry.session.push(Cancelled(execution_id, generation, "ack deadline expired"))
        d.events.expired(execution)
        d.requeue(execution, entry, next_attempt=False)
        changed = True
    grace = d.settings.grace_period
    for entry in list(d.registry.values()):
        if entry.disconnected_at is not None and now - entry.disconnected_at >= grace:
            d.lose_worker(entry, f"no stream for {grace:g}s")
            changed = True
    return changed


def keep_alive(d: Dispatcher, now: float) -> None:
    """Ping idle streams; a worker whose stream is open counts as seen now, not at its last call."""
    idle_since = time.monotonic() - d.settings.ping_interval
    for entry in d.registry.values():
        session = entry.session
        if session is not None:
            entry.last_seen = now
            if session.last_sent <= idle_since:
                session.push(Ping(now))


class Housekeeper:
    """The dispatcher's periodic tick, as one task."""

    def __init__(self, d: Dispatcher):
        self.d = d
        self.last_full_pass = 0.0
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def tick(self, now: float) -> None:
        d, s = self.d, self.d.settings
        if expire(d, now) or now - self.last_full_pass >= s.safety_tick:
            self.last_full_pass = now
            d.place()
        keep_alive(d, now)

    async def _run(self) -> None:
        s = self.d.settings
        step = max(0.05, min(1.0, s.ack_deadline / 4, s.grace_period / 4, s.safety_tick))
        while True:
            await asyncio.sleep(step)
            try:
                self.tick(self.d.clock())
            except Exception:  # one bad tick must not stop the next one
                log.exception("dispatcher housekeeping failed")
