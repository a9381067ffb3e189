"""Waiting for final states: one execution's end, and many executions' ends in one stream.

``RunAndWait`` and ``WaitExecutions`` answer from these, so a client that runs and waits,
or waits on a whole batch, holds one call instead of one ``WatchExecution`` per execution.
A final state is read where ``watch`` reads it (this server's memory when it is
authoritative, the store otherwise) and followed with the same pending feed, so a
replica sees an execution finished by another replica as a watcher does.

Final states are sent without their input (the caller sent it, and echoing a batch of
inputs could pass the message cap); the output or error is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING

from flux.dispatcher.state import validation
from flux.domain.execution import Execution
from flux.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle

log = logging.getLogger("flux.dispatcher")

MAX_WAITED = validation.MAX_BATCH_INPUTS


def checked_ids(execution_ids: Iterable[str]) -> list[str]:
    """Each id once, in the order given; refuses an empty or oversized list and bad ids."""
    unique = list(dict.fromkeys(execution_ids))
    if not unique:
        raise InvalidArgument("execution_ids is empty: give the ids RunWorkflow or RunWorkflows returned")
    if len(unique) > MAX_WAITED:
        raise InvalidArgument(
            f"execution_ids has {len(unique)} ids; the limit is {MAX_WAITED} per call: wait for the rest "
            "in further calls"
        )
    for index, execution_id in enumerate(unique):
        try:
            validation.check_id(execution_id)
        except InvalidArgument as exc:
            raise InvalidArgument(f"execution_ids[{index}]: {exc}") from None
    return unique


def _bare(execution: Execution) -> Execution:
    return execution.evolve(input_json="") if execution.input_json else execution


async def _known(
    d: Handle, execution_id: str, visible: Callable[[Execution], bool] | None = None
) -> Execution:
    found = d.current(execution_id) or await d.store.get_execution(execution_id)
    # One answer for an id not in use and one the caller may not see (``visible``): the same
    # code and words, so an answer never tells whether another tenant uses an id.
    if found is None or (visible is not None and not visible(found)):
        raise NotFound(f"execution {execution_id!r} does not exist")
    return found


async def final(d: Handle, execution_id: str, known: Execution | None = None) -> Execution:
    """The execution's final state, once it has one (``known``: its state already read)."""
    current = known or await _known(d, execution_id)
    if current.state.finished:
        return _bare(current)
    updates = d.watchers.subscribe(execution_id)
    try:
        # Re-read after subscribing: a change between the read and here is not lost.
        current = d.current(execution_id) or current
        while not current.state.finished:
            current = await d.feed.next_change(execution_id, updates, current)
        return _bare(current)
    finally:
        d.watchers.unsubscribe(execution_id, updates)


async def final_with_receipt(
    d: Handle, execution_id: str, known: Execution, receipt: Callable[[], None], after: float
) -> Execution:
    """``final``, calling ``receipt()`` first, or once ``after`` seconds have passed without a final
    state (``after`` > 0): a RunAndWaitStream run that asked for its receipt to wait
    (``receipt_after_ms``) and ends sooner is answered by its final state alone, a message fewer
    each way."""
    if after <= 0:
        receipt()
        return await final(d, execution_id, known)
    ending = asyncio.ensure_future(final(d, execution_id, known))
    try:
        if (await asyncio.wait((ending,), timeout=after))[0] and ending.exception() is None:
            return ending.result()
        if execution_id in d.table.unwritten and not await _written(d, execution_id):
            return await ending  # no receipt for a run not stored: its final state answers
        receipt()  # still going; or its wait failed, and its refusal follows the receipt, as it would have
        return await ending
    except asyncio.CancelledError:
        # Its caller went away before it was told: the run goes on, kept as a told one would be.
        current = d.table.get(execution_id) if execution_id in d.table.unwritten else None
        if current is not None:
            d.table.save(current)
        raise
    finally:
        ending.cancel()


async def _written(d: Handle, execution_id: str) -> bool:
    """Write a run queued before its row (``submission.submit(written_later=True)``) as it is now,
    before a receipt tells its caller it exists; False when there is nothing to write (its final
    state, deciding, writes it) or the store refused (the write is retried; no receipt then)."""
    current = d.table.get(execution_id)
    if current is None:
        return False
    try:
        await asyncio.shield(d.table.save(current))
    except Exception as exc:
        log.warning("could not store execution %s before its receipt: %s", execution_id, exc)
        return False
    return True


async def known(
    d: Handle, execution_ids: Iterable[str], visible: Callable[[Execution], bool] | None = None
) -> list[Execution]:
    """Each execution named (each once), as it is now: every id is checked before a wait begins,
    so an unknown one refuses the call (NotFound, naming it) instead of ending a stream half answered.

    An execution ``visible`` refuses is unknown, checked in the same place in the same order: the
    first id refused is named whether it is missing or another tenant's.
    """
    return [await _known(d, execution_id, visible) for execution_id in checked_ids(execution_ids)]


async def finals(d: Handle, executions: list[Execution]) -> AsyncIterator[list[Execution]]:
    """The final states of ``executions`` (from ``known``) as they finish: the finished ones first,
    then each batch that finished by the time the last one was taken."""
    waiting = [e for e in executions if not e.state.finished]
    finished = [_bare(e) for e in executions if e.state.finished]
    if finished:
        yield finished
    if not waiting:
        return
    if d.feed.changes_pushed:
        async for batch in _pushed_finals(d, waiting):
            yield batch
        return
    done: asyncio.Queue[Execution | BaseException] = asyncio.Queue()

    async def follow(execution: Execution) -> None:
        try:
            done.put_nowait(await final(d, execution.execution_id, execution))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the stream, which raises it
            done.put_nowait(exc)

    followers = [asyncio.ensure_future(follow(execution)) for execution in waiting]
    try:
        left = len(waiting)
        while left:
            batch = [await done.get()]
            while not done.empty():
                batch.append(done.get_nowait())
            for item in batch:
                if isinstance(item, BaseException):
                    raise item
            left -= len(batch)
            yield batch  # type: ignore[misc]
    finally:
        for follower in followers:
            follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*followers, return_exceptions=True)


async def _pushed_finals(d: Handle, waiting: list[Execution]) -> AsyncIterator[list[Execution]]:
    """``finals`` where every change reaches the watchers (one server): one queue for them all, no
    task per execution (a burst of 2,000 waited for spent a tenth of its server's time on them)."""
    ids = [execution.execution_id for execution in waiting]
    updates: asyncio.Queue[Execution] = asyncio.Queue()
    d.watchers.subscribe_many(ids, updates)
    try:
        left = set(ids)
        # Re-read after subscribing: a change between the read and here is not lost.
        batch = _newly_finished([now for i in ids if (now := d.current(i)) is not None], left)
        while True:
            if batch:
                yield batch
            if not left:
                return
            changes = [await updates.get()]
            while not updates.empty():
                changes.append(updates.get_nowait())
            batch = _newly_finished(changes, left)
    finally:
        d.watchers.unsubscribe_many(ids, updates)


def _newly_finished(changes: list[Execution], left: set[str]) -> list[Execution]:
    """The final states among ``changes`` of executions still in ``left``, taken out of it."""
    batch = []
    for change in changes:
        if change.state.finished and change.execution_id in left:
            left.discard(change.execution_id)
            batch.append(_bare(change))
    return batch


async def watch(d: Handle, execution_id: str) -> AsyncIterator[Execution]:
    """The current state, then every change, ending after a final state."""
    current = await d.get(execution_id)
    if current.state.finished:
        yield current
        return
    input_json = current.input_json  # read once: an input never changes
    updates = d.watchers.subscribe(execution_id)
    try:
        # Re-read after subscribing: a change between get() and here is not lost.
        current = with_input(d.current(execution_id) or current, input_json)
        yield current
        while not current.state.finished:
            latest = await d.feed.next_change(execution_id, updates, current)
            if latest.moved_from(current):
                current = with_input(latest, input_json)
                yield current
    finally:
        d.watchers.unsubscribe(execution_id, updates)


def with_input(execution: Execution, input_json: str) -> Execution:
    return execution if execution.input_json or not input_json else execution.evolve(input_json=input_json)
