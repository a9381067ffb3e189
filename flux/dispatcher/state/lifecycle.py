"""What the dispatcher tells the world at each lifecycle event.

The dispatcher calls one method per event, right where the event happens:
``submitted``, ``dispatched``, ``claimed``, ``finished`` (COMPLETED, FAILED or
CANCELLED), ``requeued``, ``expired``, ``worker_connected`` and
``worker_disconnected``. Each call counts the event, times it when it is a
dispatch stage, and writes one INFO line on the ``flux.lifecycle`` logger with
the execution id, workflow, worker and generation as structured fields (see
``flux.observe.logs``). Never a token, an input, an output or an error message:
those can hold user data.

The dispatch path runs thousands of these a second, so each call is a few
integer updates, a bisect, and, only when INFO is enabled, a log line queued for
the thread that writes them (``flux.observe.logs.event``).
Counters are plain ints owned by the event loop: no locks.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from flux.dispatcher.state.traces import CoreTraces
from flux.domain.execution import Execution, State
from flux.observe import logs, tracing
from flux.observe.fleet import Change, FleetFeed

if TYPE_CHECKING:  # only the type: workers.py needs nothing from here
    from flux.dispatcher.state.worker_entry import WorkerEntry

log = logging.getLogger("flux.lifecycle")

# Seconds. Fixed, so a histogram means the same on every core and across restarts;
# dense below 50 ms, where the dispatch targets are (DESIGN §7).
LATENCY_BOUNDS: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip

# Dispatch stages, each timed from submission. "started" is when the workflow body
# starts; the core cannot see that, but the worker starts the body right after its
# claim is accepted, so it is recorded at the accepted claim, as "claimed" is.
STAGES = ("dispatched", "claimed", "started")


class Requeue(StrEnum):
    """Why an execution went back to CREATED."""

    RELEASED = "released"  # its worker gave it back (draining, shutting down)
    WORKER_LOST = "worker_lost"  # its worker's stream stayed gone past the grace period
    ACK_DEADLINE = "ack_deadline"  # a dispatch was not claimed within the ack deadline
    STREAM_OVERFLOWED = "stream_overflowed"  # unclaimed on a stream cut for falling behind
    PREEMPTED = (
        "preempted"  # stopped so a tenant could reclaim its quota (flux/dispatcher/transitions/reclaim.py)
    )
    RETRY = "retry"  # an attempt failed or timed out, and its policy tries it again (transitions/attempts.py)
    MOVED = "moved"  # taken from a busy worker's own queue for a worker with free room (matching/prefetch.py)


REQUEUE_REASONS = tuple(Requeue)


class Preempt(StrEnum):
    """Why an execution was preempted."""

    RECLAIM = "reclaim"  # a tenant under its nominal quota took back what its cohort had borrowed


class Refusal(StrEnum):
    """Why a preemption that would have made room was not made."""

    BUDGET = "budget"  # its tenant's preemption budget (--preemption-budget) was spent


@dataclass(frozen=True, slots=True)
class Exemplar:
    """The latest traced observation in a bucket: Prometheus links the bucket to its trace."""

    trace_id: str  # 32 hex digits
    value: float
    at: float  # seconds since the epoch


class Histogram:
    """Counts per fixed bucket (not cumulative; the last bucket is above every bound), sum and count,
    and per bucket the latest observation of a sampled trace (an exemplar)."""

    __slots__ = ("bounds", "counts", "sum", "count", "exemplars")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BOUNDS):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.exemplars: dict[int, Exemplar] = {}

    def observe(self, value: float, trace: str = "") -> None:
        """``trace``: the observed execution's trace context (flux/observe/tracing.py carrier), if any."""
        value = max(0.0, value)  # a wall clock stepped back must not make a negative latency
        # bisect_left: a value equal to a bound belongs to that bucket (Prometheus' `le`).
        bucket = bisect_left(self.bounds, value)
        self.counts[bucket] += 1
        self.sum += value
        self.count += 1
        # version-traceid-spanid-flags: sampled when the flags' low bit is set.
        if trace and len(trace) >= 55 and int(trace[53:55], 16) & 1:
            self.exemplars[bucket] = Exemplar(trace[3:35], value, time.time())


@dataclass(slots=True)
class Counters:
    submitted: int = 0
    dispatched: int = 0
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    requeued: dict[Requeue, int] = field(default_factory=lambda: dict.fromkeys(Requeue, 0))
    preempted: dict[Preempt, int] = field(default_factory=lambda: dict.fromkeys(Preempt, 0))
    # Preemptions held back, by reason; and by (tenant, reason), shown only to the metrics token.
    preemptions_refused: dict[Refusal, int] = field(default_factory=lambda: dict.fromkeys(Refusal, 0))
    preemptions_refused_by_tenant: dict[tuple[str, Refusal], int] = field(default_factory=dict)
    ack_deadline_expiries: int = 0
    # Attempts tried again, by why the one before ended (error, timeout, heartbeat_timeout, worker_lost),
    # and timeouts that fired, by kind (timeout, heartbeat_timeout, pending_timeout).
    retries: dict[str, int] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)
    stream_connects: int = 0
    stream_reconnects: int = 0
    # Messages to and from workers, counted at the server's edge (LifecycleCounters says which).
    worker_messages_sent: int = 0
    worker_messages_received: int = 0
    # Dispatches queued ahead at a pipelining worker (--prefetch), also counted in ``dispatched``.
    queued_dispatches: int = 0
    # Dependents released (their last dependency ended as they asked) and ended by a dependency.
    dependencies_released: int = 0
    dependencies_cancelled: int = 0


def _execution_fields(execution: Execution) -> dict[str, Any]:
    return {
        "execution_id": execution.execution_id,
        "workflow": execution.workflow.name,
        "version": execution.workflow.version,
        "worker": execution.worker or None,
        "generation": execution.generation,
        "attempt": execution.attempt,
    }


def _many_fields(executions: list[Execution]) -> dict[str, Any]:
    """One line's fields for many executions: how many, the first and last ids, the workflow(s), the batch."""
    first = executions[0]
    fields: dict[str, Any] = {
        "executions": len(executions), "first": first.execution_id, "last": executions[-1].execution_id,
    }  # fmt: skip
    names = {e.workflow.name for e in executions}
    fields["workflow"] = first.workflow.name if len(names) == 1 else ",".join(sorted(names))
    if first.batch_id:
        fields["batch_id"] = first.batch_id
    return fields


class Lifecycle:
    """The dispatcher's observer: counts, latency histograms, and one log line per event."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self.started_at = clock()
        self.counters = Counters()
        self.latency = {stage: Histogram() for stage in STAGES}
        # Hash of the session token of each worker registration that has opened a
        # stream: a second stream under the same registration is a reconnect. A hash,
        # so no token is kept around here; one entry per worker name.
        self._streams: dict[str, int] = {}
        # Who watches the fleet (ControlService.WatchFleet); free while nobody does.
        self.fleet = FleetFeed()
        # The executions' spans (traces.py); None, and nothing built, unless this process traces.
        self.traces = CoreTraces(clock) if tracing.ACTIVE else None

    # ------------------------------------------------------------- executions

    def submitted(self, execution: Execution) -> None:
        self.counters.submitted += 1
        self.fleet.publish(Change.EXECUTION_QUEUED, execution)
        if log.isEnabledFor(logging.INFO):
            _emit("submitted", "execution submitted", _execution_fields(execution))

    def submitted_many(self, executions: list[Execution]) -> None:
        """A bulk call's executions (RunWorkflows: ``map``, ``--many``, a graph) were stored: counted
        and published each, and logged as one line for the call (``executions``: how many; the
        first and last ids), not one per member: 100,000 lines cost the server more than storing them."""
        if len(executions) == 1:
            self.submitted(executions[0])
            return
        self.counters.submitted += len(executions)
        if self.fleet:  # anyone listening
            for execution in executions:
                self.fleet.publish(Change.EXECUTION_QUEUED, execution)
        if executions and log.isEnabledFor(logging.INFO):
            _emit("submitted", "executions submitted", _many_fields(executions))

    def dispatched(self, execution: Execution) -> None:
        """Pushed to ``execution.worker`` under ``execution.generation``; resources reserved."""
        self.counters.dispatched += 1
        self.fleet.publish(Change.EXECUTION_DISPATCHED, execution)
        self.latency["dispatched"].observe(execution.updated_at - execution.created_at, execution.trace)
        if log.isEnabledFor(logging.INFO):
            _emit("dispatched", "execution dispatched", _execution_fields(execution))

    def claimed(self, execution: Execution) -> None:
        """The worker's claim was accepted: RUNNING, and the body starts right away."""
        self.counters.claimed += 1
        waited = execution.updated_at - execution.created_at
        self.latency["claimed"].observe(waited, execution.trace)
        self.latency["started"].observe(waited, execution.trace)
        if log.isEnabledFor(logging.INFO):
            _emit("claimed", "execution claimed", _execution_fields(execution))

    def finished(self, execution: Execution) -> None:
        """A final state decided: COMPLETED, FAILED or CANCELLED."""
        state = execution.state
        self.fleet.publish(Change.EXECUTION_FINISHED, execution)
        if self.traces is not None:
            self.traces.dropped(execution.execution_id)
        if state is State.COMPLETED:
            self.counters.completed += 1
        elif state is State.FAILED:
            self.counters.failed += 1
        elif state is State.CANCELLED:
            self.counters.cancelled += 1
        if log.isEnabledFor(logging.INFO):
            fields = _execution_fields(execution)
            if execution.error is not None:
                fields["error_type"] = execution.error.type  # the type only: a message may hold user data
            event = state.name.lower()
            _emit(event, f"execution {event}", fields)

    def cancelled_many(self, finals: list[Execution]) -> None:
        """A batch's members cancelled together (``flux batch cancel``), each already published
        (``finished_elsewhere``): counted each, and logged as one line for them (``executions``:
        how many; the first and last ids), as a bulk submission is."""
        self.counters.cancelled += len(finals)
        if self.traces is not None:
            for final in finals:
                self.traces.dropped(final.execution_id)
        if finals and log.isEnabledFor(logging.INFO):
            _emit("cancelled", "executions cancelled", _many_fields(finals))

    def finished_elsewhere(self, execution: Execution) -> None:
        """A final state another replica decided and announced: shown on this replica's feed, not counted again."""
        self.fleet.publish(Change.EXECUTION_FINISHED, execution)

    def requeued(self, before: Execution, after: Execution, reason: Requeue) -> None:
        """``before`` left its worker for ``reason``; ``after`` is CREATED again, or FAILED when out of attempts."""
        if after.state is State.FAILED:
            self.finished(after)
            return
        self.counters.requeued[reason] += 1
        self.fleet.publish(Change.EXECUTION_QUEUED, after)
        if self.traces is not None:
            self.traces.requeued(after)
        if log.isEnabledFor(logging.INFO):
            fields = _execution_fields(before)
            fields["attempt"] = after.attempt
            fields["reason"] = str(reason)
            _emit("requeued", "execution requeued", fields)

    def expired(self, execution: Execution) -> None:
        """A dispatch was not claimed within the ack deadline; it goes back to CREATED, same attempt."""
        self.counters.ack_deadline_expiries += 1
        if self.traces is not None:
            self.traces.requeued(execution)
        if self.fleet:  # the watcher sees it as it now is: back in line, on no worker
            queued = execution.evolve(state=State.CREATED, worker="", gpu_indices=())
            self.fleet.publish(Change.EXECUTION_QUEUED, queued)
        self.counters.requeued[Requeue.ACK_DEADLINE] += 1
        if log.isEnabledFor(logging.INFO):
            fields = _execution_fields(execution)
            fields["reason"] = str(Requeue.ACK_DEADLINE)
            _emit("expired", "dispatch not claimed within the ack deadline; requeued", fields)

    # ------------------------------------------------------------- workers

    def worker_connected(self, entry: WorkerEntry) -> None:
        """A dispatch stream opened (a reconnect when this registration had one before)."""
        self.counters.stream_connects += 1
        self.fleet.publish(Change.WORKER_CONNECTED, entry)
        registration = hash(entry.session_token)
        reconnect = self._streams.get(entry.name) == registration
        if reconnect:
            self.counters.stream_reconnects += 1
        else:
            self._streams[entry.name] = registration
        if log.isEnabledFor(logging.INFO):
            _emit(
                "worker_connected",
                "worker reconnected" if reconnect else "worker connected",
                {
                    "worker": entry.name,
                    "transport": entry.transport,
                    "reconnect": reconnect,
                    "held": len(entry.holdings),
                },
            )

    def worker_disconnected(self, entry: WorkerEntry) -> None:
        """Its dispatch stream ended; what it holds waits for the grace period."""
        self.fleet.publish(Change.WORKER_DISCONNECTED, entry)
        if log.isEnabledFor(logging.INFO):
            _emit(
                "worker_disconnected",
                "worker disconnected",
                {"worker": entry.name, "transport": entry.transport, "held": len(entry.holdings)},
            )

    def worker_reported(self, entry: WorkerEntry, started_draining: bool) -> None:
        """It reported its resources; ``started_draining`` when this report turned draining on."""
        self.fleet.publish(Change.WORKER_DRAINING if started_draining else Change.WORKER_REPORTED, entry)

    def worker_paused(self, entry: WorkerEntry) -> None:
        """An operator paused or resumed it (``entry.paused`` says which)."""
        self.fleet.publish(Change.WORKER_PAUSED if entry.paused else Change.WORKER_RESUMED, entry)


def _emit(event: str, message: str, fields: dict[str, Any]) -> None:
    # The formatters (flux.observe.logs) render `fields`: key=value in text, members in JSON.
    logs.event(log, event, message, fields)
