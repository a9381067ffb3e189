"""Why an execution is where it is: its state, or for a pending one the explanation over the
fleet (every replica's), with preemption under way and the pools that could run it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from flux.dispatcher.state import validation
from flux.domain.dependencies import waiting_summary
from flux.domain.execution import Execution, State
from flux.matching import Explanation, explain
from flux.matching.explain import ordinal
from flux.matching.placement import effective, fragmentation_note

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Answer to "why is this execution where it is?" (``explanation`` when it is pending)."""

    execution: Execution
    summary: str
    explanation: Explanation | None = None
    queue_position: int | None = None


async def why(d: Handle, execution_id: str, viewer: str = "") -> Diagnosis:
    """``viewer``: the tenant a caller other than a cluster admin speaks for; the answer then names
    no other tenant (the preemption it would make says "another tenant")."""
    validation.check_id(execution_id)
    execution = d.current(execution_id) or await d.get(execution_id)
    if execution.state is not State.CREATED:
        entry = d.registry.get(execution.worker) if execution.worker else None
        place = entry.position(execution_id) if entry is not None else None
        if place is not None:  # in its worker's own queue (--prefetch): it starts when its room allows
            return Diagnosis(
                execution, f"queued at worker {execution.worker} ({ordinal(place)})", queue_position=place - 1
            )
        where = f" on worker {execution.worker}" if execution.worker else ""
        return Diagnosis(execution, f"execution is {execution.state.label}{where}")
    if not d.catalogue.knows(execution.workflow.name, execution.workflow.version):
        await d.feed.learn_workflows()
    # Paused workers are shown, with "is paused" as their reason; the fleet is every replica's.
    views = [w.view() for w in await d.fleet.entries() if w.accepting]
    shape = d.catalogue.shape_of(execution)
    explanation = explain(
        shape,
        views,
        execution_id=execution_id,
        aging=d.aging,
        now=d.clock(),
        accounts=d.usage.accounts,
        queue=d.queue if d.usage.accounts is not None else None,
    )
    summary = explanation.summary
    wait = execution.not_before - d.clock()
    if wait > 0:  # out of line until then (a retry's backoff): the workers' verdict comes after
        summary = f"waiting {wait:.1f} s to retry attempt {execution.attempt}; then {summary}"
    blocked = d.flow.blocked(execution_id)
    if blocked is not None:
        # Waiting on a budget comes first: no worker will be asked until it has room.
        summary = f"waiting: {blocked.describe()}; {summary}"
    if execution.waiting:
        # Held out of the queue until its dependencies end: that comes before any worker.
        summary = f"{await dependencies_line(d, execution)}; then {summary}"
    preempting = d.reclaimer.preview(execution_id, shape, viewer)
    if preempting:
        summary = f"{summary}; {preempting}"
    if explanation.capable == 0 and shape.requests.gpu and not explanation.infeasible:
        # Enough GPUs free in all, on no one worker: how they were spread is the reason, so say the policy.
        free = [
            len(view.free_gpus)
            for view in views
            if not view.paused and d.feasibility.permanent(shape, view) is None
        ]
        note = fragmentation_note(shape.requests.gpu, free, effective(shape.placement, d.settings.placement))
        if note:
            summary = f"{summary}; {note}"
    if explanation.capable == 0:  # no connected worker can take it: say which pool could
        pools = d.pools.could_run(shape, await d.pools.demand(d))
        if pools:
            summary = f"{summary}; {pools}"
    return Diagnosis(execution, summary, explanation, d.queue.position(execution_id))


async def dependencies_line(d: Handle, execution: Execution) -> str:
    """``waiting for 2 of 3 dependencies: e1 RUNNING, e2 CREATED``, read from memory, else the store."""
    known = {e: found for e in execution.after if (found := d.current(e)) is not None}
    missing = [e for e in execution.after if e not in known]
    if missing:
        known |= await d.store.get_executions(missing)
    states = {e: known[e].state if e in known else None for e in execution.after}
    return waiting_summary(execution.after, states, execution.when)
