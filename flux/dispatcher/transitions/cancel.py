"""Ending an execution this server holds before its worker does: a client's cancel, another
replica's final state, or a write another replica made first (``drop_stale``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from flux.dispatcher.state.session import Stop
from flux.dispatcher.transitions import gangs
from flux.domain.execution import Execution, State
from flux.errors import FailedPrecondition, Unavailable

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle


async def cancel_here(d: Handle, execution_id: str) -> Execution:
    """Cancel an execution this server holds, committing the final state before answering."""
    execution = d.table.get(execution_id)
    if execution is None:
        finished = d.table.finished.get(execution_id) or await d.get(execution_id)
        if finished.state is not State.CANCELLED:
            raise FailedPrecondition(f"execution {execution_id} is already {finished.state.label}")
        # A retried cancel (perhaps its commit failed): store it again, answer the same.
        await d.table.commit_final(finished)
        return finished
    final = execution.evolve(state=State.CANCELLED, updated_at=d.clock())
    stop_here(d, execution, final)
    await d.table.commit_final(final)
    return await d.with_input(final)


async def cancel_many_here(d: Handle, execution_ids: list[str]) -> None:
    """``cancel_here`` for many (a batch's members), with no answer to make: each one held here
    ends CANCELLED, all written in one commit and logged as one line; one not held has finished
    (or is finishing)."""
    now, finals = d.clock(), []
    for execution_id in execution_ids:
        execution = d.table.get(execution_id)
        if execution is None:
            continue
        final = execution.evolve(state=State.CANCELLED, updated_at=now)
        stop_here(d, execution, final, announce=False)  # announced below, as one
        finals.append(final)
    if finals:
        d.events.cancelled_many(finals)
        try:
            await asyncio.shield(d.table.save_finals(finals))
        except Exception as exc:  # the table writes them again (save_unsaved)
            raise Unavailable(f"could not store the cancellations: {exc}") from exc


def stop_here(d: Handle, execution: Execution, final: Execution, announce: bool = True) -> None:
    """End an execution held here as ``final``: unqueue it, or tell its worker and free its room.

    ``announce=False``: another replica decided ``final`` and announces it (logs and counts it once).
    """
    execution_id = execution.execution_id
    entry = d.registry.get(execution.worker) if execution.worker else None
    if execution.gang is not None and execution.state is not State.CREATED:
        # Every member's worker stops and gives its room back (rank 0's below, as for any execution).
        d.passes.room_freed(gangs.stop_all(d, execution, "cancelled by a client", keep=execution.worker))
    if execution.state is State.CREATED:
        d.queue.remove(execution_id)
        d.flow.release(execution_id)  # it may hold a budget, or wait on one
        # A preemptor that will never use the room it asked for: its stops are withdrawn.
        d.reclaimer.withdraw(execution_id)
    elif entry is not None and entry.session is not None:
        entry.session.push(Stop(execution_id, execution.generation, "cancelled by a client"))
    d.table.finish(final)
    if entry is not None:
        entry.release(execution_id)
    if announce:
        d.events.finished(final)
    else:
        d.events.finished_elsewhere(final)
    if entry is not None:
        d.passes.room_freed([entry])


def drop_stale(d: Handle, execution_id: str) -> None:
    """Another replica changed this execution (a guarded write conflicted): what is held here is stale."""
    execution = d.table.drop(execution_id)
    d.queue.remove(execution_id)
    d.flow.release(execution_id)
    if execution is not None and execution.worker:
        for entry in gangs.holders(d, execution):  # a gang: every member's worker
            if entry.release(execution_id):
                d.passes.room_freed([entry])
    d.watchers.wake(execution_id)
