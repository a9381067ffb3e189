"""Replicas: a waiting execution ends FAILED once, however many replicas decide it.

Every replica mirrors the shared queue (feed.py), so each arms a row's pending timeout and judges
it under ``--infeasible-after``. The one that decides takes the row out of its line at once (no
pass of its own places it meanwhile), then asks the database to end it only if it is still
CREATED at the generation it saw (``SharedStore.fail_waiting``). Its update lands: it announces
the final state, as the row has it. It finds nothing: another replica claimed or ended the row
first, and this one lets go of its copy (the next resync mirrors it again if it still waits).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from flux.dispatcher.state.deadlines import Kind
from flux.dispatcher.transitions import cancel
from flux.domain.execution import Execution, ExecutionError, State
from flux.domain.policy import PENDING_TIMEOUT

if TYPE_CHECKING:
    from collections import Counter

    from flux.dispatcher.handle import Handle
    from flux.dispatcher.modes.shared.background import Background
    from flux.store import SharedStore

log = logging.getLogger("flux.replica")

# After the database could not be reached, decide again this much later.
AGAIN_AFTER = 1.0


def fail_waiting(
    d: Handle,
    store: SharedStore,
    tasks: Background,
    claiming: Counter[str],
    execution: Execution,
    error: ExecutionError,
) -> None:
    d.queue.remove(execution.execution_id)
    d.flow.release(execution.execution_id)
    tasks.spawn(_fail(d, store, claiming, execution, error))


async def _fail(
    d: Handle, store: SharedStore, claiming: Counter[str], execution: Execution, error: ExecutionError
) -> None:
    execution_id = execution.execution_id
    try:
        final = await store.fail_waiting(
            execution_id, execution.generation, PENDING_TIMEOUT, error, d.clock()
        )
    except Exception as exc:
        log.warning("could not end %s (%s); deciding again in %gs", execution_id, exc, AGAIN_AFTER)
        _again(d, execution)
        return
    current = d.table.get(execution_id)
    if final is None:
        # Claimed or ended by another replica; a claim of our own in flight settles it here.
        if current is not None and current.state is State.CREATED and execution_id not in claiming:
            cancel.drop_stale(d, execution_id)
        return
    d.events.counters.timeouts[PENDING_TIMEOUT] = d.events.counters.timeouts.get(PENDING_TIMEOUT, 0) + 1
    if current is not None:
        cancel.stop_here(d, current, final)
    else:
        d.table.remember(final)
        d.events.finished(final)
    d.table.committed(final)
    d.watchers.wake(execution_id)


def _again(d: Handle, execution: Execution) -> None:
    """Back in line; a pending timeout is decided again shortly (infeasibility at its next check)."""
    current = d.table.get(execution.execution_id)
    if current is None or current.state is not State.CREATED:
        return
    shape = d.catalogue.shape_of(current)
    d.queue_up(current, shape)
    d.passes.work_added([shape])
    if current.effective_policy.pending_timeout is not None and not current.attempts:
        d.timers.arm(Kind.PENDING, current.execution_id, 0, d.clock() + AGAIN_AFTER)
