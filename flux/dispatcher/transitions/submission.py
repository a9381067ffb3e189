"""Submission: new executions, durable before they are answered, then queued and placed.

One submission (RunWorkflow) and a batch (RunWorkflows) take the same steps through the same
helpers: the workflow resolved for the caller's tenant (``_record``), each input checked, the
executions built (``_new``: id, sequence number, priority, trace), stored by the mode's binder,
then queued (``enqueue``, or ``store_and_queue`` for a batch). What a batch shares is the cost:
every input is checked before anything is stored (a bad one refuses the whole call, naming
its index), the batch is admitted against the pending limits as a whole (its tenant's, then the
server's: ``ExecutionTable.admit``), every row is queued
for the store in one event-loop step (the store's group commit then writes them in one
transaction: all or none), and the scheduler runs one scoped pass for the workflow's shape
instead of one per input.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, NamedTuple

from flux.dispatcher.state import validation
from flux.dispatcher.transitions import batches, dependencies
from flux.dispatcher.transitions.batches import NO_BATCH, BatchAsk
from flux.domain.batch import Batch
from flux.domain.execution import Execution, State, copies
from flux.domain.gang import GangRun
from flux.domain.policy import Policy, Retry, default_policy
from flux.domain.tenant import DEFAULT_TENANT
from flux.errors import InvalidArgument, Unavailable
from flux.matching import explain

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.domain.workflow import WorkflowRecord
    from flux.matching import Shape, WorkerView


class Overrides(NamedTuple):
    """What a run may set in place of its workflow's (``client.run(attempt_timeout=, retry=, key=)``)."""

    attempt_timeout: float | None = None
    retry: Retry | None = None
    # The flow-control key of every part, in place of the keys computed from the input.
    key: str | None = None
    # A gang of this many members, with its workflow's topology (``client.run(gang_size=)``).
    gang_size: int | None = None
    # Executions each run waits for, and how they must end (transitions/dependencies.py); ``sees``:
    # whether the caller may see an execution (one it may not is refused as not existing).
    after: tuple[str, ...] = ()
    when: str = ""
    sees: Callable[[Execution], bool] | None = None


NO_OVERRIDES = Overrides()


def policy_for(record: WorkflowRecord, overrides: Overrides) -> Policy | None:
    """The policy an execution of ``record`` runs under; None: the default with its max_attempts."""
    policy = record.policy
    if overrides.attempt_timeout is None and overrides.retry is None:
        return policy
    base = policy if policy is not None else default_policy(record.max_attempts)
    return base.overridden(overrides.attempt_timeout, overrides.retry)


async def submit(
    d: Handle,
    workflow_name: str,
    input_json: str = "",
    version: int = 0,
    priority: int | None = None,
    trace: str = "",
    tenant: str = DEFAULT_TENANT,
    every_workflow: bool = True,
    overrides: Overrides = NO_OVERRIDES,
    written_later: bool = False,
) -> Execution:
    """Accept one execution (durable before this returns), as this server holds it now.

    ``written_later``: the caller tells nobody of it before its final state, or before it has
    written it (``waiting.final_with_receipt``), so a binder that may queues it unwritten: a run
    that ends within its receipt's wait costs one write, its final state's, not two. Not for an
    input only the store keeps, nor for one that waits on dependencies.
    """
    _named(workflow_name)
    record = await _record(d, workflow_name, version, tenant, every_workflow)
    input_json = validation.checked_json(input_json or "null", "input_json")
    rank = record.priority if priority is None else validation.checked_priority(priority)
    after, when, waiting, broken_by = await dependencies.resolve(
        d, overrides.after, overrides.when, overrides.sees
    )
    size = validation.utf8_bytes(input_json)
    d.table.admit(size, tenant, d.usage.admission(tenant))
    [execution] = _new(
        d,
        record,
        [input_json],
        rank,
        trace,
        tenant,
        policy_for(record, overrides),
        overrides.key,
        gang_size=overrides.gang_size,
    )
    if after:
        execution = execution.evolve(after=after, when=when, waiting=waiting)
    if broken_by is not None:
        return (await _born_broken(d, [dependencies.born_broken(d, execution, broken_by)]))[0]
    unwritten = (
        written_later
        and not after
        and size <= d.settings.inline_input_bytes
        and d.binder.queue_unwritten(execution)
    )
    if not unwritten:
        await d.binder.submit(execution)
    d.timing.submitted(execution)
    held = d.table.get(execution.execution_id) or execution
    return held if held.input_json else held.evolve(input_json=input_json)


async def submit_many(
    d: Handle,
    workflow_name: str,
    inputs: list[str],
    version: int = 0,
    priority: int | None = None,
    field: str = "input_json",
    tenant: str = DEFAULT_TENANT,
    trace: str = "",
    every_workflow: bool = True,
    overrides: Overrides = NO_OVERRIDES,
    batch: BatchAsk = NO_BATCH,
    ids: list[str] | None = None,
) -> list[Execution]:
    """Accept one execution per input (durable before this returns); answered in input order.

    ``ids``: the executions' ids, one per input, in place of new random ones (a schedule's runs,
    named by their ticks).

    The executions come back as this server holds them, some perhaps already
    dispatched; a caller that answers with them may drop their inputs (it sent them).
    ``batch``: make them a new batch, or add them to one (transitions/batches.py); each names it.
    """
    _named(workflow_name)
    checked = validation.checked_inputs(inputs, field)
    record = await _record(d, workflow_name, version, tenant, every_workflow)
    rank = record.priority if priority is None else validation.checked_priority(priority)
    size = sum(map(validation.utf8_bytes, checked))
    after, when, waiting, broken_by = await dependencies.resolve(
        d, overrides.after, overrides.when, overrides.sees
    )
    joined, new = await batches.resolve(d, batch, record.name, tenant)
    with d.table.storing(len(checked), size, tenant, d.usage.admission(tenant)):
        executions = _new(
            d,
            record,
            checked,
            rank,
            trace,
            tenant,
            policy_for(record, overrides),
            overrides.key,
            joined,
            ids,
            gang_size=overrides.gang_size,
        )
        if new and joined is not None:
            await d.store.save_batch(joined)
        if after:
            executions = [e.evolve(after=after, when=when, waiting=waiting) for e in executions]
        if broken_by is not None:
            return await _born_broken(d, [dependencies.born_broken(d, e, broken_by) for e in executions])
        # Finished here even if the caller goes away meanwhile, as a single submission is
        # (LocalBinder.submit, SharedBinder.submit).
        await asyncio.shield(d.binder.submit_many(executions))
    if executions[0].policy is not None:  # they share it: only a pending timeout arms a timer
        for execution in executions:
            d.timing.submitted(execution)
    return [d.table.get(e.execution_id) or e for e in executions]


async def _born_broken(d: Handle, finals: list[Execution]) -> list[Execution]:
    """New executions that can never run (a dependency already ended against their ``when``):
    stored CANCELLED at once, reason ``dependency``, never queued."""
    try:
        await asyncio.gather(*(d.store.save(final) for final in finals))
    except Exception as exc:
        raise Unavailable(f"could not store the executions: {exc}") from exc
    for final in finals:
        d.events.submitted(final)
        d.events.finished(final)
        d.table.remember(final)
    return finals


async def resolve(d: Handle, workflow_name: str, tenant: str) -> WorkflowRecord:
    """The latest version of a workflow ``tenant`` may run (its own or ``default``'s), or NotFound."""
    _named(workflow_name)
    return await _record(d, workflow_name, 0, tenant, False)


def _named(workflow_name: str) -> None:
    if not workflow_name:
        raise InvalidArgument("workflow_name is required: the name of a registered workflow")


async def _record(
    d: Handle, workflow_name: str, version: int, tenant: str, every_workflow: bool
) -> WorkflowRecord:
    """The workflow version a submission runs; ``every_workflow`` False: ``tenant``'s own or ``default``'s."""
    if not d.catalogue.knows(workflow_name, max(version, 0)):
        await d.feed.learn_workflows()  # perhaps registered through another replica
    return d.catalogue.resolve(workflow_name, version, None if every_workflow else tenant)


def _new(
    d: Handle,
    record: WorkflowRecord,
    inputs: list[str],
    rank: int,
    trace: str,
    tenant: str,
    policy: Policy | None = None,
    key: str | None = None,
    batch: Batch | None = None,
    ids: list[str] | None = None,
    gang_size: int | None = None,
) -> list[Execution]:
    """One new execution per (checked) input, numbered in input order; ``trace``: the caller's
    W3C context (flux/observe/tracing.py carrier), its ``flux.submit`` span started here while tracing.
    ``key``: the run's flow-control key, in place of those computed from each input."""
    if record.flow.empty:  # every input's keys are none (or the batch's alone, below)
        keys: list[tuple[tuple[str, str], ...]] = [()] * len(inputs)
    else:
        keys = [_flow_keys(record, text, key, index, len(inputs)) for index, text in enumerate(inputs)]
    batch_id = ""
    if batch is not None:
        batch_id, throttle = batch.batch_id, batch.flow_keys()
        if throttle:
            joined: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
            keys = [joined.get(k) or joined.setdefault(k, tuple(sorted((*k, *throttle)))) for k in keys]
    now = d.clock()
    size = gang_size if gang_size is not None else record.gang.size if record.gang is not None else None
    if ids is None:
        ids = new_ids(len(inputs))
    template = template_of(record, policy, now, tenant, trace, size).evolve(priority=rank, batch_id=batch_id)
    first = d.take_seq(len(inputs))  # consecutive, in input order
    rows = zip(ids, range(first, first + len(inputs)), inputs, keys, strict=True)
    executions = copies(template, ("execution_id", "seq", "input_json", "flow_keys"), rows)
    traces = d.events.traces
    return executions if traces is None else [traces.accepted(e) for e in executions]


def template_of(
    record: WorkflowRecord, policy: Policy | None, now: float, tenant: str, trace: str, gang_size: int | None
) -> Execution:
    """What every execution of ``record`` made by one call shares (its members are copies of it,
    with their own id, sequence number and input)."""
    return Execution(
        execution_id="",
        workflow=record.ref,
        seq=0,
        input_json="",
        max_attempts=policy.max_attempts if policy is not None else record.max_attempts,
        policy=policy,
        created_at=now,
        updated_at=now,
        tenant=tenant,
        trace=trace,
        gang=GangRun(gang_size) if gang_size is not None else None,
    )


def new_ids(count: int) -> list[str]:
    """``count`` new execution ids, each 32 random hex digits as ``uuid4().hex`` is, in increasing
    order: the call's own random 16 digits, then 16 random digits each, sorted. One read of the
    system's random source for all of them, and the store's id index takes them as one run of
    neighbours, not at ``count`` random places (a third less SQLite time for 100,000 members).
    Unique as random 128-bit ids are across calls; within one, a repeated half is drawn again."""
    while True:
        digits = os.urandom(8 * (count + 1)).hex()
        prefix = digits[:16]
        ids = sorted(prefix + digits[start : start + 16] for start in range(16, 16 * (count + 1), 16))
        if len(set(ids)) == count:
            return ids


def _flow_keys(
    record: WorkflowRecord, input_json: str, key: str | None, index: int, count: int
) -> tuple[tuple[str, str], ...]:
    """An execution's resolved flow-control keys; refused (naming the input) when its input lacks
    the field a key names: a key computed as "missing" would lump unrelated runs together."""
    if record.flow.empty:
        return ()
    try:
        return tuple(sorted(record.flow.keys_for(input_json, key).items()))
    except ValueError as exc:
        where = f"input_json[{index}]" if count > 1 else "input_json"
        raise InvalidArgument(f"{where}: {exc}; or pass key= to the run") from None


def enqueue(d: Handle, execution: Execution) -> None:
    """Queue a stored, pending execution and try to place it right away."""
    enqueue_all(d, [execution])


def enqueue_all(d: Handle, executions: list[Execution]) -> None:
    """``enqueue`` for each, with one pass for them all (the rows one commit landed)."""
    queued = []
    with d.passes.together():
        for execution in executions:
            execution = d.table.add(execution)
            shape = d.catalogue.shape_of(execution)
            d.queue_up(execution, shape)
            d.passes.work_added([shape])
            queued.append((execution, shape))
    for execution, shape in queued:
        _still_waiting(d, execution, shape)


def _still_waiting(d: Handle, execution: Execution, shape: Shape) -> None:
    """After its pass: what an execution that found no place yet sets going."""
    if execution.execution_id in d.queue and d.usage.accounts is not None:
        d.reclaimer.reclaim([shape])  # a tenant back under its quota need not wait for the tick
    if d.events.traces is not None and execution.trace:
        trace_verdict(d, execution, shape)


def trace_verdict(
    d: Handle, execution: Execution, shape: Shape, views: list[WorkerView] | None = None
) -> None:
    """Record, for its ``flux.queued`` span, why a traced execution still waits (only while tracing)."""
    if execution.execution_id not in d.queue or d.events.traces is None:
        return  # placed already
    # Executions of its shape ahead of it; O(queue), so not counted in a very long queue.
    position = d.queue.position(execution.execution_id) if len(d.queue) <= 10_000 else None
    if views is None:
        views = [w.view() for w in d.registry.entries.values() if w.accepting]
    why = explain(shape, views, execution_id=execution.execution_id, aging=d.aging, now=d.clock())
    verdict = "infeasible" if why.infeasible else "nominated" if why.nominated else "busy"
    d.events.traces.waiting(execution, position, verdict, why.summary)


def trace_verdicts(d: Handle, most: int = 256) -> None:
    """After a full pass: a verdict event for each traced waiting execution whose verdict changed
    (a worker gone busy, infeasible, a nomination), the ``most`` longest waiting."""
    if d.events.traces is None:
        return
    views = [w.view() for w in d.registry.entries.values() if w.accepting]
    for execution_id in d.events.traces.waiting_ids(most):
        execution = d.table.unfinished.get(execution_id)
        if execution is not None and execution.trace and execution.state is State.CREATED:
            trace_verdict(d, execution, d.catalogue.shape_of(execution), views)


async def store_and_queue(d: Handle, executions: list[Execution], claiming: Container[str] = ()) -> None:
    """Store a batch of new executions in one commit, then queue them and place them in one pass.

    ``claiming``: ids a replica is claiming right now. A replica's own NOTIFY may come
    back before this resumes and queue (or even claim) a placeholder of a row; what it
    already did stands, as for a single submission (SharedBinder.submit).
    """
    # One save for them all: the store's next batch holds every row, so one transaction.
    try:
        await d.store.save_many(executions)
    except Exception as exc:
        raise Unavailable(f"could not store the {len(executions)} executions: {exc}") from exc
    shapes: dict[Shape, None] = {}
    d.events.submitted_many(executions)
    # Looked up once: this loop runs for each of up to 10,000 executions.
    held, add, shape_of, queue_up = d.table.unfinished, d.table.add, d.catalogue.shape_of, d.queue_up
    for execution in executions:
        if execution.state >= State.COMPLETED:  # a graph's item whose dependency already ended against it
            d.events.finished(execution)
            d.table.remember(execution)
            continue
        known = held.get(execution.execution_id)
        if known is None and execution.execution_id not in claiming:
            execution = add(execution)
            shape = shape_of(execution)
            queue_up(execution, shape)
            shapes[shape] = None
        elif known is not None and known.state is State.CREATED:
            add(execution)  # the full record replaces the placeholder, counted against the limits
    if shapes:
        d.passes.work_added(shapes)
