"""Bulk submission (RunWorkflows): many inputs of one workflow, one durable commit, one placement pass.

Each input becomes its own execution, with its own record and lifecycle, exactly
as RunWorkflow would make it. What the batch shares is the cost: every input is
checked before anything is stored (a bad one refuses the whole call, naming its
index), the batch is admitted against the pending limits as a whole, every row
is queued for the store in one event-loop step (the store's group commit then
writes them in one transaction: all or none), and the scheduler runs one scoped
pass for the workflow's shape instead of one per input.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Container
from typing import TYPE_CHECKING

from flux.dispatcher.state import validation
from flux.domain.execution import Execution, State
from flux.domain.tenant import DEFAULT_TENANT
from flux.errors import InvalidArgument, Unavailable

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.matching import Shape


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
) -> list[Execution]:
    """Accept one execution per input (durable before this returns); answered in input order.

    The executions come back as this server holds them, some perhaps already
    dispatched; a caller that answers with them may drop their inputs (it sent them).
    """
    if not workflow_name:
        raise InvalidArgument("workflow_name is required: the name of a registered workflow")
    checked = validation.checked_inputs(inputs, field)
    if not d.catalogue.knows(workflow_name, max(version, 0)):
        await d.feed.learn_workflows()  # perhaps registered through another replica
    record = d.catalogue.resolve(workflow_name, version, None if every_workflow else tenant)
    rank = record.priority if priority is None else validation.checked_priority(priority)
    now = d.clock()
    with d.table.storing(len(checked), sum(validation.utf8_bytes(text) for text in checked)):
        executions = [
            Execution(
                execution_id=uuid.uuid4().hex,
                workflow=record.ref,
                seq=d.take_seq(),
                input_json=input_json,
                max_attempts=record.max_attempts,
                created_at=now,
                updated_at=now,
                priority=rank,
                tenant=tenant,
                trace=trace,
            )
            for input_json in checked
        ]
        if d.events.traces is not None:
            executions = [d.events.traces.accepted(e) for e in executions]
        # Finished here even if the caller goes away meanwhile, as a single submission is
        # (Dispatcher.store_submission, SharedBinder.submit).
        await asyncio.shield(d.binder.submit_many(executions))
    return [d.table.get(e.execution_id) or e for e in executions]


async def store_and_queue(d: Handle, executions: list[Execution], claiming: Container[str] = ()) -> None:
    """Store a batch of new executions in one commit, then queue them and place them in one pass.

    ``claiming``: ids a replica is claiming right now. A replica's own NOTIFY may come
    back before this resumes and queue (or even claim) a placeholder of a row; what it
    already did stands, as for a single submission (SharedBinder.submit).
    """
    # All saves in one loop step: the store's next batch holds every row, so one transaction.
    written = [d.store.save(e) for e in executions]
    try:
        await asyncio.gather(*written)
    except Exception as exc:
        raise Unavailable(f"could not store the {len(executions)} executions: {exc}") from exc
    shapes: dict[Shape, None] = {}
    for execution in executions:
        d.events.submitted(execution)
        known = d.table.get(execution.execution_id)
        if known is None and execution.execution_id not in claiming:
            execution = d.table.add(execution)
            shape = d.catalogue.shape_of(execution)
            d.queue_up(execution, shape)
            shapes[shape] = None
        elif known is not None and known.state is State.CREATED:
            d.table.add(execution)  # the full record replaces the placeholder, counted against the limits
    if shapes:
        d.passes.work_added(shapes)
