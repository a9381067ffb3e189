"""An attempt's end and what follows it: recorded (``record_of``), then retried after its policy's
wait or FAILED (``ended``), requeued once stored (``requeue_saved``), preempted or never
started, and a manual retry of a FAILED execution (``retry_failed``). Its own module because
every transition that ends an attempt uses these (worker calls, housekeeping, preemption,
infeasibility), while timing.py holds the clocks that decide when one ends."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from flux.dispatcher.state.lifecycle import Requeue
from flux.dispatcher.transitions import gangs
from flux.domain.execution import Execution, ExecutionError, State
from flux.domain.policy import (
    ATTEMPT_MESSAGE_BYTES,
    ERROR,
    PENDING_TIMEOUT,
    PREEMPTED,
    TIMEOUT_ERROR,
    WORKER_LOST,
    Attempt,
)
from flux.errors import FailedPrecondition, NotFound

if TYPE_CHECKING:
    from collections.abc import Callable

    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry

log = logging.getLogger("flux.dispatcher")


def record_of(execution: Execution, now: float, reason: str, error: ExecutionError | None) -> Attempt:
    message = error.message if error is not None else ""
    if len(message) > ATTEMPT_MESSAGE_BYTES:
        message = message[: ATTEMPT_MESSAGE_BYTES - 3] + "..."
    return Attempt(
        execution.attempt,
        execution.worker,
        execution.started_at or execution.updated_at,
        now,
        reason,
        error.type if error is not None else "",
        message,
    )


def ended(
    d: Handle,
    execution: Execution,
    entry: WorkerEntry | None,
    reason: str,
    error: ExecutionError | None,
) -> Execution:
    """A running attempt ended without a result to keep: record it, free its room, and retry it later
    (CREATED, the next attempt, a stored not-before time) or end it FAILED with ``reason``.

    Errors the body raised are retried only under a declared retry policy, as its
    ``retry_on``/``no_retry_on`` say; timeouts and lost workers always are, while attempts remain
    (as Temporal retries them).
    """
    if entry is not None:
        entry.release(execution.execution_id)
    if execution.gang is not None:
        # One member's end is the attempt's end on every member: one attempt, retried or failed whole.
        d.passes.room_freed(gangs.stop_all(d, execution, f"a gang member ended: {reason}"))
    now = d.clock()
    policy = execution.effective_policy
    attempts = (*execution.attempts, record_of(execution, now, reason, error))
    wanted = error is None or reason != ERROR or (policy.retry_errors and policy.retry.retries(error.names))
    if wanted and execution.attempt < execution.max_attempts:
        # A lost worker is tried again at once (nothing says the work is at fault), as before policies.
        delay = 0.0 if reason == WORKER_LOST else policy.retry.delay(execution.attempt)
        retried = execution.evolve(
            state=State.CREATED,
            worker="",
            gpu_indices=(),
            attempt=execution.attempt + 1,
            attempts=attempts,
            error=error,
            not_before=now + delay if delay > 0 else 0.0,
            started_at=0.0,
            updated_at=now,
            gang=gangs.reset(execution).gang,
        )
        if len(retried.input_json) > d.settings.inline_input_bytes:
            retried = retried.evolve(input_json="")  # back to waiting: its input waits in the store
        d.table.update(retried)
        if reason != WORKER_LOST:  # a lost worker's caller tells of it (housekeeping.lose_worker)
            d.events.requeued(execution, retried, Requeue.RETRY)
        d.events.counters.retries[reason] = d.events.counters.retries.get(reason, 0) + 1
        requeue_saved(d, retried)
        return retried
    if error is None:
        error = ExecutionError(
            TIMEOUT_ERROR.get(reason, "Error"), f"attempt {execution.attempt} ended: {reason}"
        )
    failed = execution.evolve(
        state=State.FAILED,
        error=error,
        reason=reason,
        attempts=attempts,
        started_at=0.0,
        updated_at=now,
    )
    d.table.finish(failed)
    if reason != WORKER_LOST:  # a lost worker's caller tells of it (housekeeping.lose_worker)
        d.events.finished(failed)
    d.table.save(failed)
    return failed


# After a failed write of a requeued row, try again this much later.
REQUEUE_RETRY = 1.0


def requeue_saved(d: Handle, requeued: Execution, landed: Callable[[], None] | None = None) -> None:
    """Save a row that went back to CREATED, and put it back in line only once that is committed.

    Replicas: a claim of a row still SCHEDULED in the database would fail. One server: it
    does not write dispatches, so the stored generation must catch up with the dispatch just
    ended before the next is handed out; then a restart skips past at most one unwritten
    dispatch (recover), and two restarts in a row never hand out one generation twice.
    """

    def saved() -> None:
        if d.table.get(requeued.execution_id) is requeued:
            shape = d.catalogue.shape_of(requeued)
            d.queue_up(requeued, shape)
            d.passes.work_added([shape])
        if landed is not None:  # ``landed``: the caller's step once the row is committed
            landed()

    def retry(_: BaseException) -> None:
        asyncio.get_running_loop().call_later(REQUEUE_RETRY, again)

    def again() -> None:
        if d.table.get(requeued.execution_id) is requeued:
            requeue_saved(d, requeued, landed)
        elif landed is not None:
            landed()

    d.table.save(requeued, done=saved, failed=retry)


def never_started(d: Handle, execution: Execution, error: ExecutionError) -> None:
    """A waiting execution ends FAILED, reason ``pending_timeout``: its pending timeout passed, or it
    was infeasible for ``--infeasible-after`` (transitions/infeasible.py). The binder decides how:
    on replicas every one of them may decide it, and the row must end once."""
    d.binder.fail_waiting(execution, error)


def fail_here(d: Handle, execution: Execution, error: ExecutionError) -> Execution:
    """``never_started`` on one server: ended here, saved as any final state is."""
    d.queue.remove(execution.execution_id)
    d.flow.release(execution.execution_id)  # an admitted one held its key's slot while it waited
    failed = execution.evolve(state=State.FAILED, reason=PENDING_TIMEOUT, error=error, updated_at=d.clock())
    d.events.counters.timeouts[PENDING_TIMEOUT] = d.events.counters.timeouts.get(PENDING_TIMEOUT, 0) + 1
    d.table.finish(failed)
    d.events.finished(failed)
    d.table.save(failed)
    return failed


def preempted_run(d: Handle, execution: Execution) -> Execution:
    """A preempted attempt, recorded: its run time counts against the next attempt's timeout, and
    its attempt number is not used up (it is tried again as the same attempt)."""
    if execution.state is not State.RUNNING or not execution.started_at:
        return execution
    now = d.clock()
    return execution.evolve(
        run_time=execution.run_time + max(0.0, now - execution.started_at),
        attempts=(*execution.attempts, record_of(execution, now, PREEMPTED, None)),
    )


async def retry_failed(d: Handle, execution_id: str) -> Execution:
    """A manual retry (``flux execution retry``): a FAILED execution goes back in line as CREATED with
    its attempt one higher (and ``max_attempts`` raised to it when spent), its attempts kept.

    The store reopens the row only if it is still FAILED (``Store.reopen``), so two operators
    retrying at once start one attempt, and a replica's copy never goes back in time.
    """
    found = d.table.current(execution_id) or await d.store.get_execution(execution_id)
    if found is None:
        raise NotFound(f"execution {execution_id!r} does not exist")
    if found.state is not State.FAILED:
        raise FailedPrecondition(
            f"execution {execution_id} is {found.state.label}; only a FAILED execution can be retried"
        )
    if execution_id in d.table.committing:
        raise FailedPrecondition(
            f"execution {execution_id} is still being stored as FAILED; retry in a moment"
        )
    now = d.clock()
    attempt = found.attempt + 1
    reopened = found.evolve(
        state=State.CREATED,
        worker="",
        gpu_indices=(),
        attempt=attempt,
        max_attempts=max(found.max_attempts, attempt),
        reason="",
        not_before=0.0,
        started_at=0.0,
        output_json="",
        updated_at=now,
        generation=found.generation + 1,
    )
    if not await d.store.reopen(reopened):
        raise FailedPrecondition(f"execution {execution_id} changed meanwhile; look at it again")
    d.table.finished.pop(execution_id, None)
    if reopened.execution_id not in d.table:
        held = d.table.add(reopened)
        shape = d.catalogue.shape_of(held)
        d.queue_up(held, shape)
        d.passes.work_added([shape])
    return await d.with_input(reopened)
