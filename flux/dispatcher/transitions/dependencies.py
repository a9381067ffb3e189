"""Dependencies: a dependent is held out of the queue until its dependencies end as it asks.

- **Submission** (``resolve``): each dependency is looked up (memory, then the store); an id
  the caller cannot see is refused as one that does not exist, naming the item. The row is
  stored with ``waiting``, the count of dependencies not yet ended; one already ended the wrong
  way makes the new execution CANCELLED from the start (reason ``dependency``).
- **Holding** (``hold``, from ``queue_up``, the one path into the queue): a row with ``waiting``
  goes into the dependency index instead (state/dependencies.py): the matcher never scans it.
- **A dependency ends** (``ended``, from ``ExecutionTable.finish``, before the final row is
  saved): each dependent it satisfies and that waits for nothing more is saved with
  ``waiting`` 0 in the same loop step, so the store's group commit writes it in the same
  transaction as the dependency's final state; it is queued once that commit lands. A dependent
  whose ``when`` can no longer hold ends CANCELLED (reason ``dependency``, "dependency e1
  failed"), and its own dependents follow, each once: a worklist, not recursion, so a long
  chain cannot overflow the stack.
- **Replicas**: every replica mirrors waiting rows into its index (PendingRef carries them), so
  whichever replica ends the last dependency releases the dependent in its own commit; a
  dependency this replica never saw end (announced by ``flux_done``, or unknown at hold time) is
  read from the store (``lookup``). A PostgreSQL claim never takes a row with ``waiting`` > 0.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from flux.domain.dependencies import DEPENDENCY, broken, checked_after, checked_when, verdict
from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef
from flux.errors import NotFound

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle

log = logging.getLogger("flux.dispatcher")

# What stands for a dependency the store no longer has (its tenant deleted): ended, so its
# dependents end too, "dependency X does not exist".
_NO_WORKFLOW = WorkflowRef("", 0, "", "")

# After a failed write of a released row, try again this much later.
RELEASE_RETRY = 1.0


async def resolve(
    d: Handle,
    after: tuple[str, ...] | list[str],
    when: str,
    sees: Callable[[Execution], bool] | None,
    field: str = "after",
) -> tuple[tuple[str, ...], str, int, Execution | None]:
    """Checked ``(after, when, waiting, broken_by)`` for a new execution: ``broken_by``, a
    dependency that already ended so that ``when`` can never hold (the new one starts CANCELLED)."""
    after = checked_after(after, field)
    if not after:
        return (), "", 0, None
    when = checked_when(when)
    known = {e: found for e in after if (found := _known(d, e)) is not None}
    missing = [e for e in after if e not in known]
    if missing:
        known |= await d.store.get_executions(missing)
    waiting, broken_by = 0, None
    for index, execution_id in enumerate(after):
        found = known.get(execution_id)
        if found is None or (sees is not None and not sees(found)):
            raise NotFound(f"{field}[{index}]: execution {execution_id!r} does not exist")
        ok = verdict(when, found.state)
        if ok is None:
            waiting += 1
        elif ok is False and broken_by is None:
            broken_by = found
    return after, when, waiting, broken_by


def born_broken(d: Handle, execution: Execution, dependency: Execution) -> Execution:
    """A new execution one of whose dependencies already ended against its ``when``."""
    return execution.evolve(
        state=State.CANCELLED,
        reason=DEPENDENCY,
        error=broken(dependency.execution_id, dependency.state),
        waiting=0,
        updated_at=d.clock(),
    )


def _known(d: Handle, execution_id: str) -> Execution | None:
    """What memory says of an execution: a final state first (it is remembered as soon as it is
    decided, before its commit), then the live one."""
    return d.table.finished.get(execution_id) or d.table.get(execution_id)


def hold(d: Handle, execution: Execution) -> None:
    """Hold a stored execution with ``waiting`` > 0 until its dependencies end (never queued here)."""
    open_, unknown = [], []
    for dependency_id in execution.after:
        found = _known(d, dependency_id)
        if found is None:
            unknown.append(dependency_id)
            open_.append(dependency_id)
            continue
        ok = verdict(execution.when, found.state)
        if ok is False:
            _end(d, execution, found)
            return
        if ok is None:
            open_.append(dependency_id)
    if not open_:
        release(d, execution)
        return
    d.dependencies.hold(execution.execution_id, open_)
    if len(open_) != execution.waiting:
        d.table.set(execution.evolve(waiting=len(open_)))  # counted anew (restart, mirror)
    if unknown:
        spawn(d, lookup(d, unknown))


async def lookup(d: Handle, execution_ids: list[str]) -> None:
    """Dependencies this server has not seen end: read them, and apply those that have.

    Their dependents are read too: one another replica already released or ended (in the commit
    that ended the dependency) is settled here from its row, not decided a second time."""
    dependents = sorted({e for dependency in execution_ids for e in d.dependencies.waiting_on(dependency)})
    try:
        found = await d.store.get_executions(execution_ids)
        rows = await d.store.get_executions(dependents) if dependents else {}
    except Exception as exc:  # the database away: the replica's safety tick reads them again
        log.warning("could not read %d dependencies: %s", len(execution_ids), exc)
        return
    for dependent_id in dependents:
        row = rows.get(dependent_id)
        if dependent_id in d.dependencies and (row is None or row.state.finished or not row.waiting):
            d.dependencies.forget(dependent_id)
            held = d.table.get(dependent_id)
            if held is not None and held.state is State.CREATED:
                d.table.drop(dependent_id)  # the mirror takes the released row again (flux_pending)
            d.watchers.wake(dependent_id)
    for execution_id in execution_ids:
        dependency = found.get(execution_id)
        if dependency is None:
            ended(d, Execution(execution_id, _NO_WORKFLOW, 0, "", 1, state=State.CANCELLED))
        elif dependency.state.finished:
            ended(d, dependency)


def ended(d: Handle, final: Execution) -> None:
    """``final`` ended (its row is saved next, in this loop step): release or end its dependents."""
    index = d.dependencies
    index.forget(final.execution_id)  # a held dependent itself ended (cancelled, timed out)
    if final.execution_id not in index.dependents:
        return
    index.backlog.append(final)
    if index.busy:
        return  # the loop below, further up the stack, takes it
    index.busy = True
    try:
        while index.backlog:
            dependency = index.backlog.pop()
            for dependent_id in index.waiting_on(dependency.execution_id):
                dependent = d.table.get(dependent_id)
                if dependent is None or dependent.state is not State.CREATED:
                    index.forget(dependent_id)
                    continue
                if verdict(dependent.when, dependency.state):
                    if index.satisfied(dependent_id, dependency.execution_id):
                        release(d, dependent)
                    else:  # one fewer to wait for: its row says so, in the same commit
                        fewer = dependent.evolve(waiting=len(index.open[dependent_id]))
                        d.table.set(fewer)
                        d.table.save(fewer)
                else:
                    _end(d, dependent, dependency)  # table.finish -> ended(dependent): onto the backlog
    finally:
        index.busy = False


def release(d: Handle, execution: Execution) -> None:
    """Save ``execution`` with nothing left to wait for; queue it once that is committed, unless
    the binder placed it at once, to bind in that same commit (replicas: binder.place_released)."""
    d.dependencies.forget(execution.execution_id)
    released = execution.evolve(waiting=0, updated_at=d.clock())
    d.table.set(released)
    d.events.counters.dependencies_released += 1

    def saved() -> None:
        # By id, not identity: a replica's submission may have put its full record back in
        # place of the mirror's copy meanwhile (SharedBinder.submit); still waiting in the row
        # it holds, it is released all the same.
        current = _releasable(d, released.execution_id)
        if current is not None:
            shape = d.catalogue.shape_of(current)
            d.queue_up(current, shape)
            d.passes.work_added([shape])

    def retry(_: BaseException) -> None:
        asyncio.get_running_loop().call_later(RELEASE_RETRY, again)

    def again() -> None:
        # Queued already, it is written all the same: a claim that rode with the failed write
        # failed with it, and its answer put the row back in line, still waiting in the database.
        current = d.table.get(released.execution_id)
        if (
            current is not None
            and current.state is State.CREATED
            and released.execution_id not in d.dependencies
        ):
            release(d, current)

    if d.binder.place_released(released):
        d.table.save(released, failed=retry)  # its claim rides in this commit; pushed once it lands
    else:
        d.table.save(released, done=saved, failed=retry)


def _releasable(d: Handle, execution_id: str) -> Execution | None:
    """The released execution as held now, with nothing left to wait for; None if it is gone,
    ended, queued already, or held again."""
    current = d.table.get(execution_id)
    if current is None or current.state is not State.CREATED or execution_id in d.dependencies:
        return None
    if execution_id in d.queue:
        return None
    if current.waiting:
        current = current.evolve(waiting=0)
        d.table.set(current)
    return current


def _end(d: Handle, dependent: Execution, dependency: Execution) -> None:
    """``dependent`` can never run: CANCELLED, reason ``dependency``, naming the dependency."""
    from flux.dispatcher.transitions import cancel

    d.dependencies.forget(dependent.execution_id)
    error: ExecutionError = broken(dependency.execution_id, dependency.state)
    if not dependency.workflow.name and dependency.state is State.CANCELLED:
        error = ExecutionError(error.type, f"dependency {dependency.execution_id} does not exist")
    final = dependent.evolve(state=State.CANCELLED, reason=DEPENDENCY, error=error, updated_at=d.clock())
    d.events.counters.dependencies_cancelled += 1
    cancel.stop_here(d, dependent, final)
    d.table.save(final)


def spawn(d: Handle, work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    d.dependencies.tasks.add(task)
    task.add_done_callback(d.dependencies.tasks.discard)


async def with_upstream(d: Handle, execution: Execution) -> Execution:
    """``execution`` with the outputs of its dependencies, ``after``'s order (at most MAX_AFTER:
    bounded as its ``after`` is). One that did not complete gives "null"."""
    known = {e: found for e in execution.after if (found := d.table.finished.get(e)) is not None}
    missing = [e for e in execution.after if e not in known]
    if missing:
        known |= await d.store.get_executions(missing)
    upstream = tuple(
        (e, (found.output_json or "null") if found is not None and found.state is State.COMPLETED else "null")
        for e in execution.after
        for found in (known.get(e),)
    )
    return execution.evolve(upstream=upstream)
