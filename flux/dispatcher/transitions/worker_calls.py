"""What a worker's calls do to an execution it holds: claim, complete, release.

Each is fenced: the call names the execution's current generation and worker,
so a stale dispatch (requeued, expired, moved to another worker) cannot change it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flux.dispatcher.state import validation
from flux.dispatcher.state.lifecycle import Requeue
from flux.dispatcher.transitions import attempts, gangs, housekeeping
from flux.domain.execution import Execution, ExecutionError, State
from flux.domain.policy import COMPLETED, ERROR
from flux.domain.worker import WorkerResources
from flux.errors import FailedPrecondition, FluxError, NotFound, logged_refusal

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry

log = logging.getLogger("flux.dispatcher")


def claim(d: Handle, name: str, session_token: str, execution_id: str, generation: int) -> Execution:
    d.registry.authorize(name, session_token)
    return _claim(d, name, execution_id, generation)


def _claim(d: Handle, name: str, execution_id: str, generation: int) -> Execution:
    execution = fenced(d, execution_id, name, generation)
    if d.reclaimer.is_stopping(execution):
        # Refused, it will not run here: free the room now rather than at the grace's end.
        _hand_back(d, execution)
        raise FailedPrecondition(_preempted(execution_id))
    if d.timing.is_stopping(execution):
        raise FailedPrecondition(_timed_out(d, execution))
    if execution.state is State.RUNNING:
        return execution  # a retried claim
    if execution.state is not State.SCHEDULED:
        raise FailedPrecondition(f"execution {execution_id} is {execution.state.label}, not SCHEDULED")
    if execution.gang is not None:
        return gangs.claim(d, execution, name)
    entry = d.registry.get(name)
    if entry is not None and execution_id in entry.queued:
        _claim_queued(d, entry, execution)
    now = d.clock()
    running = execution.evolve(state=State.RUNNING, updated_at=now, started_at=now)
    d.table.update(running)
    d.events.claimed(running)
    d.table.save(running)
    d.timing.claimed(running)  # its timeout and heartbeat clocks start with the attempt
    return running


def _claim_queued(d: Handle, entry: WorkerEntry, execution: Execution) -> None:
    """Its worker starts a queued execution: reserve its room now, and refill the worker's queue."""
    if entry.claim_queued(execution.execution_id):
        d.passes.room_freed([entry])  # its queue has a place again
        return
    # Its worker counts its room otherwise than we do (a result we have not heard of yet): no body
    # runs beyond the room we count, so it goes back in line and runs wherever it fits.
    requeued = housekeeping.requeue(d, execution, entry, next_attempt=False)
    d.events.requeued(execution, requeued, Requeue.RELEASED)
    d.passes.work_added([d.catalogue.shape_of(requeued)])
    raise FailedPrecondition(
        f"worker {entry.name!r} has no room for queued execution {execution.execution_id} by this "
        "server's count; it goes back in line"
    )


async def complete(
    d: Handle,
    name: str,
    session_token: str,
    execution_id: str,
    generation: int,
    output_json: str | None,
    error: ExecutionError | None,
    resources: WorkerResources | None = None,
) -> Execution:
    entry = d.registry.authorize(name, session_token)
    final = finish(d, entry, execution_id, generation, output_json, error)
    if final is None:
        return await _retried(d, name, execution_id, generation, output_json, error)
    if resources is not None:
        entry.report(resources, None)
    d.passes.room_freed([entry])
    d.housekeeper.mover.soon(entry)
    if not final.state.finished:  # a gang member's result, before the last: stored, then answered
        await asyncio.shield(d.table.save(final))
        return final
    await d.table.commit_final(final)
    return final


def finish(
    d: Handle,
    entry: WorkerEntry,
    execution_id: str,
    generation: int,
    output_json: str | None,
    error: ExecutionError | None,
) -> Execution | None:
    """A Complete up to its commit: the final state decided, shown to nobody yet, and its room freed.

    None when the table no longer holds the execution: a retried Complete (``_retried``).
    """
    execution = d.table.get(execution_id)
    if execution is None:
        return None
    execution = fenced(d, execution_id, entry.name, generation)
    if d.reclaimer.is_stopping(execution):
        # Its worker is done with it: free the room now rather than at the grace's end.
        _hand_back(d, execution)
        raise FailedPrecondition(_preempted(execution_id))
    if d.timing.is_stopping(execution):
        # Past its timeout: a result that comes after is not kept (its worker is done with it).
        raise FailedPrecondition(_timed_out(d, execution))
    member_claimed = (
        execution.gang is not None and execution.gang.rank_of(entry.name) in execution.gang.claimed
    )
    if execution.state is not State.RUNNING and not member_claimed:
        raise FailedPrecondition(
            f"execution {execution_id} is {execution.state.label}; claim it before completing"
        )
    if execution.gang is not None and error is None:
        rank = execution.gang.rank_of(entry.name)
        if rank in dict(execution.gang.outputs):
            return execution  # a member's retried result: answered as the first was
        final = gangs.completed(
            d, execution, entry, validation.checked_json(output_json or "null", "output_json")
        )
        if not final.state.finished:
            return final
        d.timing.forget(execution_id)
        final = final.evolve(attempts=_recorded(execution, final.updated_at))
        d.table.finish(final)
        d.events.finished(final)
        return final
    now = d.clock()
    d.timing.forget(execution_id)
    if execution.started_at:  # how long its bodies run sets how deep its queue goes (WorkerEntry.depth)
        entry.ran(now - execution.started_at)
    if error is None:
        output_json = validation.checked_json(output_json or "null", "output_json")
        final = execution.evolve(
            state=State.COMPLETED,
            output_json=output_json,
            updated_at=now,
            started_at=0.0,
            attempts=_recorded(execution, now),
        )
    else:
        # The policy decides: another attempt after its backoff (CREATED, not final), or FAILED.
        # A gang's member failing ends the attempt of every member (attempts.ended stops them).
        return attempts.ended(d, execution, entry, ERROR, error)
    # Its room first: a dependent it releases (table.finish) may be placed there at once.
    entry.release(execution_id)
    d.table.finish(final)
    d.events.finished(final)
    return final


def _recorded(execution: Execution, now: float) -> tuple:
    """Its attempts with the one that completed, when earlier ones are recorded (a first try that
    completes adds nothing to its row: the common case stays as small as before)."""
    if not execution.attempts:
        return ()
    return (*execution.attempts, attempts.record_of(execution, now, COMPLETED, None))


async def _retried(
    d: Handle,
    name: str,
    execution_id: str,
    generation: int,
    output_json: str | None,
    error: ExecutionError | None,
) -> Execution:
    done = d.table.finished.get(execution_id) or await d.get(execution_id)
    if (
        (done.worker == name or gangs.is_member(done, name))
        and done.generation == generation
        and done.state in (State.COMPLETED, State.FAILED)
        and same_result(done, output_json, error)
    ):
        # A retried Complete whose answer was lost: the first result stands. Store it
        # again, as the answer may have been lost because its commit failed.
        await d.table.commit_final(done)
        return done
    raise FailedPrecondition(f"execution {execution_id} is already {done.state.label}")


def release(
    d: Handle, name: str, session_token: str, execution_id: str, generation: int, reason: str
) -> Execution:
    entry = d.registry.authorize(name, session_token)
    execution = fenced(d, execution_id, name, generation)
    if execution.state not in (State.SCHEDULED, State.RUNNING):
        raise FailedPrecondition(f"execution {execution_id} is {execution.state.label}; nothing to release")
    log.debug("execution %s released by %s: %s", execution_id, name, reason or "no reason given")
    if d.reclaimer.is_stopping(execution):
        requeued = d.reclaimer.stopped(execution)
    elif d.timing.is_stopping(execution):  # stopped for its timeout, and handed back: it ends
        requeued = d.timing.stopped(execution)
    else:
        requeued = housekeeping.requeue(d, execution, entry, next_attempt=False)
        d.events.requeued(execution, requeued, Requeue.RELEASED)
    with d.passes.together():  # one pass for the requeued execution and the worker's freed room
        d.passes.work_added([d.catalogue.shape_of(requeued)])
        d.passes.room_freed([entry])
    return requeued


@dataclass(frozen=True, slots=True)
class Result:
    """One item of a CompleteBatch: the same fields as a single Complete's result."""

    execution_id: str
    generation: int
    output_json: str | None
    error: ExecutionError | None
    # Claims it first: the worker's body ended before its claim was sent, so the claim came with this.
    claim: bool = False


# Per item of a batch: None when accepted, else the refusal the single call would have raised.
Answers = list[FluxError | None]


def claim_batch(d: Handle, name: str, session_token: str, items: Sequence[tuple[str, int]]) -> Answers:
    """``claim`` for each (execution id, generation), in order; one refused item leaves the others be."""
    d.registry.authorize(name, session_token)  # a wrong token refuses the whole call, not each item
    validation.check_batch(len(items), "items")
    answers: Answers = []
    for execution_id, generation in items:
        try:
            claim(d, name, session_token, execution_id, generation)
        except Exception as exc:
            answers.append(_refused(d, exc))
        else:
            answers.append(None)
    return answers


async def complete_batch(
    d: Handle,
    name: str,
    session_token: str,
    items: Sequence[Result],
    resources: WorkerResources | None = None,
) -> Answers:
    """``complete`` for each result, in order; answered once every accepted final state is committed.

    Every item is decided first, its write started with it, and the freed room gets one
    pass; then the commits are waited for together, written in one group commit.
    """
    entry = d.registry.authorize(name, session_token)  # a wrong token refuses the whole call, not each item
    validation.check_batch(len(items), "items")
    decided: list[Execution | FluxError | None] = []
    written: dict[str, asyncio.Future[None]] = {}
    with d.passes.together():
        for item in items:
            try:
                if item.claim and d.table.get(item.execution_id) is not None:
                    # Not for one already finished: that is a retry, answered as any retried result.
                    _claim(d, name, item.execution_id, item.generation)
                final = finish(d, entry, item.execution_id, item.generation, item.output_json, item.error)
            except Exception as exc:
                decided.append(_refused(d, exc))
                continue
            decided.append(final)
            if final is not None and not final.state.finished:
                written[final.execution_id] = d.table.save(final)  # a gang member's, not the last
            elif final is not None:
                # Now, not after the wait below: a worker that dies cancels this call there. A
                # final state decided but never written would be shown as RUNNING forever.
                written[final.execution_id] = d.table.save(final)
        if resources is not None:  # one report for the batch, after its executions released theirs
            entry.report(resources, None)
        d.passes.room_freed([entry])
    # After its pass: with room still free and nothing queued, it takes from others' queues.
    d.housekeeper.mover.soon(entry)

    # Every write is waited for together, without a task per item (a burst's batches are large):
    # ``asyncio.wait`` leaves the writes be when this call is cancelled, as a shield would.
    writes = set(written.values())
    if writes:
        await asyncio.wait(writes)
    answers: Answers = []
    for item, outcome in zip(items, decided, strict=True):
        if isinstance(outcome, FluxError):
            answers.append(outcome)
            continue
        try:
            if outcome is None:
                await _retried(d, name, item.execution_id, item.generation, item.output_json, item.error)
            elif not outcome.state.finished:
                written[outcome.execution_id].result()
            else:
                await d.table.commit_final(outcome, written[outcome.execution_id])
        except Exception as exc:
            answers.append(_refused(d, exc))
        else:
            answers.append(None)
    return answers


def _refused(d: Handle, exc: Exception) -> FluxError:
    return logged_refusal(exc, d.store.unavailable, log, "a batch item")


def fenced(d: Handle, execution_id: str, name: str, generation: int) -> Execution:
    validation.check_id(execution_id)
    execution = d.table.get(execution_id)
    if execution is None:
        if execution_id in d.table.finished:
            raise FailedPrecondition(
                f"execution {execution_id} is already {d.table.finished[execution_id].state.label}"
            )
        raise NotFound(f"execution {execution_id!r} does not exist or is finished")
    if execution.worker != name and not gangs.is_member(execution, name):
        raise FailedPrecondition(f"execution {execution_id} is not dispatched to worker {name!r}")
    if generation != execution.generation:
        raise FailedPrecondition(
            f"stale generation {generation} for execution {execution_id}; the current dispatch is {execution.generation}"
        )
    return execution


def _hand_back(d: Handle, execution: Execution) -> None:
    """A preempted execution its worker is done with: back in line, and a pass over the whole queue
    (its tenant's usage fell: the tenant that reclaimed goes first by fair share)."""
    d.reclaimer.stopped(execution)
    d.passes.everything()


def heartbeat(
    d: Handle, name: str, session_token: str, execution_id: str, generation: int, details_json: str
) -> None:
    """A running attempt is alive (transitions/timing.py keeps when, and its details)."""
    d.registry.authorize(name, session_token)
    d.timing.heartbeat(fenced(d, execution_id, name, generation), details_json)


def _timed_out(d: Handle, execution: Execution) -> str:
    """Hand a timed-out attempt back (its worker is done with it) and say why its call is refused."""
    d.timing.stopped(execution)
    return f"execution {execution.execution_id} ran past its timeout; this try's result is not recorded"


def _preempted(execution_id: str) -> str:
    return (
        f"execution {execution_id} was preempted (a tenant reclaimed its quota) and goes back in line; "
        "this try's result is not recorded"
    )


def same_result(done: Execution, output_json: str | None, error: ExecutionError | None) -> bool:
    """Whether a Complete repeats the result already recorded (a retry), not a different one."""
    if error is not None:
        return done.state is State.FAILED and done.error == error
    return done.state is State.COMPLETED and done.output_json == (output_json or "null")
