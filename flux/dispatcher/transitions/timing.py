"""What happens to an execution over time: attempts that end, retries after a stored wait, attempt
timeouts, heartbeats, and the pending deadline.

Every deadline is a timer in ``d.timers`` (state/deadlines.py), armed where its clock starts and
checked when it fires against what the table holds then (its token is the generation or the
attempt it was armed for), so nothing is ever disarmed.

An attempt that ends without a result to keep (its body raised, it timed out, it went silent, its
worker was lost) goes through ``ended`` (attempts.py): it is recorded, then the execution either goes back to
CREATED with its next attempt and a *not-before* time (a retry's backoff), or ends FAILED with a
reason. The not-before time is stored in the row with the CREATED state, in the same write, and
``Dispatcher.queue_up`` never puts a row in line before it (it arms a RETRY timer instead); the
replicas' claim refuses such a row too. So a restart, a replica that dies or a failover waits out
the same wait: never lost, doubled or shortened.

A timed-out attempt is stopped the way a preempted one is (reclaim.py): its worker is told to stop
it and hand it back, and its room stays reserved until the worker confirms (Release, or a late
result, refused) or is lost, or the stop grace (``--preemption-grace``) passes. Nothing is
overcommitted while a body that does not stop at once is still running.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flux.dispatcher.state.deadlines import Kind
from flux.dispatcher.state.session import Stop
from flux.dispatcher.transitions import gangs, housekeeping
from flux.dispatcher.transitions.attempts import ended, never_started
from flux.domain.execution import Execution, ExecutionError, State
from flux.domain.policy import HEARTBEAT_TIMEOUT, TIMEOUT, TIMEOUT_ERROR, format_duration
from flux.errors import FailedPrecondition
from flux.matching import explain

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry

log = logging.getLogger("flux.dispatcher")

# A heartbeat's details are kept with the execution, and sent to its next attempt: bounded.
MAX_HEARTBEAT_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Stopping:
    """A timed-out attempt its worker has not handed back yet (it keeps its room meanwhile)."""

    generation: int
    worker: str
    reason: str  # TIMEOUT or HEARTBEAT_TIMEOUT


class Timing:
    """The attempts being stopped for a timeout, the latest heartbeat of each running attempt, and
    what each timer does when it fires."""

    def __init__(self, d: Handle):
        self.d = d
        self.stopping: dict[str, Stopping] = {}
        # Execution id -> when its running attempt last said it was alive (memory only: after a
        # restart or a move to another replica it counts from then, which only lengthens a
        # silence's grace; ``recovered``).
        self.beats: dict[str, float] = {}

    # ----------------------------------------------------------------- arming

    def submitted(self, execution: Execution) -> None:
        policy = execution.policy
        if policy is not None and policy.pending_timeout is not None and not execution.attempts:
            self.d.timers.arm(
                Kind.PENDING, execution.execution_id, 0, execution.created_at + policy.pending_timeout
            )

    def claimed(self, running: Execution) -> None:
        """Its attempt started (``running.started_at``): its timeout and heartbeat clocks start."""
        policy = running.policy
        if policy is None:
            return
        d, execution_id = self.d, running.execution_id
        if policy.timeout is not None:
            # Preempted run time counts: a body preempted after 9 of its 10 minutes has one left.
            left = max(0.0, policy.timeout - running.run_time)
            d.timers.arm(Kind.TIMEOUT, execution_id, running.generation, running.started_at + left)
        if policy.heartbeat_timeout is not None:
            self.beats[execution_id] = running.started_at
            d.timers.arm(
                Kind.HEARTBEAT,
                execution_id,
                running.generation,
                running.started_at + policy.heartbeat_timeout,
            )

    def recovered(self, execution: Execution) -> None:
        """Held again after a restart or a move between replicas: its clocks go on from the row."""
        if execution.state is State.RUNNING:
            if not execution.started_at:
                execution = execution.evolve(started_at=self.d.clock())
            self.claimed(execution)
            if execution.effective_policy.heartbeat_timeout is not None:
                # Heartbeat times live in the memory of the server that held the worker: the
                # silence clock starts again here (a beat may be on its way), not at the start.
                self.beats[execution.execution_id] = self.d.clock()
        elif execution.state is State.CREATED:
            self.submitted(execution)

    # ----------------------------------------------------------------- heartbeats

    def heartbeat(self, execution: Execution, details_json: str) -> None:
        """A running attempt (fenced by the caller) is alive; its details, when given, are kept for
        its next attempt."""
        d, execution_id = self.d, execution.execution_id
        # SCHEDULED too: a body that starts with its dispatch may beat before its claim is sent.
        if execution.state not in (State.SCHEDULED, State.RUNNING):
            raise FailedPrecondition(f"execution {execution_id} is {execution.state.label}, not RUNNING")
        self.beats[execution_id] = d.clock()
        if details_json and details_json != execution.heartbeat:
            if len(details_json) > MAX_HEARTBEAT_BYTES:
                raise FailedPrecondition(
                    f"heartbeat details of {len(details_json)} bytes; at most {MAX_HEARTBEAT_BYTES} are kept"
                )
            beat = execution.evolve(heartbeat=details_json)
            d.table.set(beat)  # nobody watches heartbeats; execution show reads the row
            d.table.save(beat)

    # ----------------------------------------------------------------- firing

    def fire(self, kind: Kind, execution_id: str, token: int, now: float) -> bool:
        """A timer came due; whether the queue or a worker's room changed (a pass is due)."""
        d = self.d
        execution = d.table.get(execution_id)
        if execution is None:
            self.beats.pop(execution_id, None)
            return False
        if kind is Kind.RETRY:
            if (
                execution.state is State.CREATED
                and execution.attempt == token
                and execution_id not in d.queue
            ):
                shape = d.catalogue.shape_of(execution)
                d.queue_up(execution, shape)
                d.passes.work_added([shape])
                return True
            return False
        if kind is Kind.PENDING:
            if execution.state is State.SCHEDULED and not execution.attempts:
                # Queued at a pipelining worker, never started: its pending timeout holds there too.
                execution = housekeeping.take_back_queued(d, execution, "its pending timeout passed")
            if execution.state is State.CREATED and not execution.attempts:
                self._pending_expired(execution)
                return True
            return False
        if execution.generation != token or execution.state is not State.RUNNING:
            return False
        if kind is Kind.STOP:
            stop = self.stopping.get(execution_id)
            if stop is None or not self.is_stopping(execution):
                return False
            entry = d.registry.get(execution.worker)
            log.warning(
                "execution %s not handed back by %s after its %s; its room is freed",
                execution_id, execution.worker, stop.reason,
            )  # fmt: skip
            if entry is not None and entry.session is not None:
                entry.session.push(
                    Stop(execution_id, execution.generation, f"{stop.reason}: stop grace expired")
                )
            self.stopped(execution)
            return True
        if self.is_stopping(execution) or d.reclaimer.is_stopping(execution):
            return False
        policy = execution.effective_policy
        if kind is Kind.HEARTBEAT:
            assert policy.heartbeat_timeout is not None
            last = self.beats.get(execution_id, execution.started_at)
            if last + policy.heartbeat_timeout > now:
                d.timers.arm(Kind.HEARTBEAT, execution_id, token, last + policy.heartbeat_timeout)
                return False
            self.stop(
                execution, HEARTBEAT_TIMEOUT, f"no heartbeat for {format_duration(policy.heartbeat_timeout)}"
            )
            return False
        if kind is Kind.TIMEOUT:
            assert policy.timeout is not None
            self.stop(
                execution,
                TIMEOUT,
                f"attempt {execution.attempt} ran past its timeout of {format_duration(policy.timeout)}",
            )
        return False

    def stop(self, execution: Execution, reason: str, why: str) -> None:
        """Tell its worker to stop the attempt; its room stays reserved until the worker confirms."""
        d = self.d
        log.info("execution %s on %s: %s; stopping it", execution.execution_id, execution.worker, why)
        d.events.counters.timeouts[reason] = d.events.counters.timeouts.get(reason, 0) + 1
        self.stopping[execution.execution_id] = Stopping(execution.generation, execution.worker, reason)
        for entry in gangs.holders(d, execution):  # a gang: every member's worker
            if entry.session is not None:
                # ``preempted``: the worker stops the body and hands the attempt back (Release).
                entry.session.push(Stop(execution.execution_id, execution.generation, why, preempted=True))
        d.timers.arm(
            Kind.STOP, execution.execution_id, execution.generation, d.clock() + d.settings.preemption_grace
        )

    def is_stopping(self, execution: Execution) -> bool:
        stop = self.stopping.get(execution.execution_id)
        return (
            stop is not None
            and stop.generation == execution.generation
            and stop.worker == execution.worker
            and execution.state is State.RUNNING
        )

    def stopped(self, execution: Execution) -> Execution:
        """A stopping attempt is handed back, or will never be: it ends with its timeout's reason."""
        d = self.d
        stop = self.stopping.pop(execution.execution_id)
        self.beats.pop(execution.execution_id, None)
        policy = execution.effective_policy
        limit = policy.timeout if stop.reason == TIMEOUT else policy.heartbeat_timeout
        error = ExecutionError(
            TIMEOUT_ERROR[stop.reason],
            f"attempt {execution.attempt} on {execution.worker}: {stop.reason.replace('_', ' ')} "
            f"after {format_duration(limit or 0)}",
        )
        ended_as = ended(d, execution, d.registry.get(execution.worker), stop.reason, error)
        entry = d.registry.get(execution.worker)
        if entry is not None:
            d.passes.room_freed([entry])
        return ended_as

    def connected(self, entry: WorkerEntry) -> None:
        """Repeat the Stop of each timed-out attempt ``entry`` still runs: the first may be lost."""
        assert entry.session is not None
        for execution_id in entry.holdings:
            execution = self.d.table.get(execution_id)
            if execution is not None and self.is_stopping(execution):
                stop = self.stopping[execution_id]
                entry.session.push(Stop(execution_id, execution.generation, stop.reason, preempted=True))

    def forget(self, execution_id: str) -> None:
        self.stopping.pop(execution_id, None)
        self.beats.pop(execution_id, None)

    # ----------------------------------------------------------------- pending

    def _pending_expired(self, execution: Execution) -> None:
        """Never started within its pending timeout: FAILED with explain's verdict as its error."""
        limit = format_duration(execution.effective_policy.pending_timeout or 0)
        verdict = self._verdict(execution)
        never_started(
            self.d,
            execution,
            ExecutionError("PendingTimeout", f"nothing could run it within {limit}: {verdict}"),
        )

    def _verdict(self, execution: Execution) -> str:
        views = [w.view() for w in self.d.registry.entries.values() if w.accepting]
        why = explain(self.d.catalogue.shape_of(execution), views, execution_id=execution.execution_id)
        return why.summary


__all__ = ["Stopping", "Timing"]
