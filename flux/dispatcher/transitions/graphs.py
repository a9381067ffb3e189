"""A graph in one call: RunWorkflows with items, each its own workflow, input and dependencies.

An item may wait for existing executions (``after``, ids) and for other items of the same call
(``after_index``). The whole graph is checked before anything is stored, and every row is
written in one commit (the store's group commit: all or none): an unknown or invisible id, an
index out of range, a cycle, or a bad input refuses the call, naming the item. Items are built
in dependency order (so each item's dependencies have ids when it is built) and answered in
the order given. An item whose existing dependency already ended against its ``when`` starts
CANCELLED (reason ``dependency``), and the items after it follow the same rules (a dependency
that is CANCELLED satisfies ``failed`` and ``finished``).

Cost: O(items + edges), one store read for the existing ids that memory does not hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flux.dispatcher.state import validation
from flux.dispatcher.transitions import dependencies, submission
from flux.domain.dependencies import MAX_AFTER, broken, checked_after, checked_when, find_cycle, verdict
from flux.domain.execution import Copier, Execution, State
from flux.domain.tenant import DEFAULT_TENANT
from flux.errors import InvalidArgument, NotFound, ResourceExhausted

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.domain.workflow import WorkflowRecord


@dataclass(frozen=True, slots=True)
class GraphItem:
    """One execution of a graph (RunWorkflows ``items``; ``client.graph()``'s ``add``)."""

    workflow_name: str
    input_json: str = ""
    version: int = 0
    priority: int | None = None
    after: tuple[str, ...] = ()
    after_index: tuple[int, ...] = ()
    when: str = ""
    key: str | None = None


async def submit_graph(
    d: Handle,
    items: Sequence[GraphItem],
    tenant: str = DEFAULT_TENANT,
    trace: str = "",
    every_workflow: bool = True,
    sees: Callable[[Execution], bool] | None = None,
) -> list[Execution]:
    """Accept every item or none (durable before this returns); answered in item order."""
    count = len(items)
    if not count:
        raise InvalidArgument("items is empty; give at least one item")
    if count > validation.MAX_BATCH_INPUTS:
        raise ResourceExhausted(
            f"items has {count} items; the limit is {validation.MAX_BATCH_INPUTS} per call"
        )
    inputs, whens, edges, external = [], [], [], []
    for i, item in enumerate(items):
        where = f"items[{i}]"
        if not item.workflow_name:
            raise InvalidArgument(f"{where}.workflow_name is required: the name of a registered workflow")
        inputs.append(validation.checked_json(item.input_json or "null", f"{where}.input_json"))
        ids = checked_after(item.after, f"{where}.after")
        for j, index in enumerate(item.after_index):
            if not 0 <= index < count or index == i:
                raise InvalidArgument(
                    f"{where}.after_index[{j}] is {index}: it must name another item of this call (0 to {count - 1})"
                )
        indexes = tuple(dict.fromkeys(item.after_index))
        if len(ids) + len(indexes) > MAX_AFTER:
            raise InvalidArgument(
                f"{where} waits for {len(ids) + len(indexes)} executions; at most {MAX_AFTER}"
            )
        whens.append(checked_when(item.when, f"{where}.when") if ids or indexes else "")
        edges.append(indexes)
        external.append(ids)
    cyclic = find_cycle(edges)
    if cyclic is not None:
        raise InvalidArgument(
            f"items[{cyclic}] is on a cycle of after_index: a graph's items cannot wait for each other in a loop"
        )
    known = await _existing(d, external, sees)
    records: dict[tuple[str, int], WorkflowRecord] = {}
    for item in items:
        if (item.workflow_name, item.version) not in records:
            records[item.workflow_name, item.version] = await submission._record(
                d, item.workflow_name, item.version, tenant, every_workflow
            )
    size = sum(validation.utf8_bytes(text) for text in inputs)
    with d.table.storing(count, size, tenant, d.usage.admission(tenant)):
        built: list[Execution | None] = [None] * count
        now, ids = d.clock(), submission.new_ids(count)
        makers = {key: _maker(record, trace, tenant, now) for key, record in records.items()}
        for i in _order(edges):
            item, key = items[i], (items[i].workflow_name, items[i].version)
            deps = [known[e] for e in external[i]] + [built[j] for j in edges[i]]  # type: ignore[misc]
            built[i] = _build(d, item, records[key], makers[key], ids[i], inputs[i], deps, whens[i], i, count)
        executions: list[Execution] = built  # type: ignore[assignment]
        stored = [built[i] for i in _order(edges)]  # dependencies first, for the queueing after
        await asyncio.shield(d.binder.submit_many(stored))  # type: ignore[arg-type]
    for execution in executions:
        if not execution.state.finished:
            d.timing.submitted(execution)
    return [d.table.get(e.execution_id) or e for e in executions]


async def _existing(
    d: Handle, external: list[tuple[str, ...]], sees: Callable[[Execution], bool] | None
) -> dict[str, Execution]:
    """Every existing execution the items name, refused (naming the item) when unknown or unseen."""
    wanted = list(dict.fromkeys(e for ids in external for e in ids))
    known = {e: found for e in wanted if (found := dependencies._known(d, e)) is not None}
    missing = [e for e in wanted if e not in known]
    if missing:
        known |= await d.store.get_executions(missing)
    for i, ids in enumerate(external):
        for j, execution_id in enumerate(ids):
            found = known.get(execution_id)
            if found is None or (sees is not None and not sees(found)):
                raise NotFound(f"items[{i}].after[{j}]: execution {execution_id!r} does not exist")
    return known


# What each item sets of its execution; the rest is its workflow's (``_maker``).
_ITEM_FIELDS = (
    "execution_id", "seq", "input_json", "priority", "flow_keys", "after", "when", "waiting", "state",
    "error", "reason",
)  # fmt: skip


def _maker(record: WorkflowRecord, trace: str, tenant: str, now: float) -> Copier:
    """Makes the executions of ``record``'s items: what they share, set once."""
    policy = submission.policy_for(record, submission.NO_OVERRIDES)  # an item sets no timeout or retry
    size = record.gang.size if record.gang is not None else None
    return Copier(submission.template_of(record, policy, now, tenant, trace, size), _ITEM_FIELDS)


def _build(
    d: Handle,
    item: GraphItem,
    record: WorkflowRecord,
    make: Copier,
    execution_id: str,
    input_json: str,
    deps: list[Execution],
    when: str,
    index: int,
    count: int,
) -> Execution:
    """One item's new execution, built once with its dependencies (``submission._new``'s fields,
    without its per-call work: a 10,000-item graph is accepted in well under a second): waiting
    for those not ended, or CANCELLED at once when one already ended against ``when``."""
    rank = record.priority if item.priority is None else validation.checked_priority(item.priority)
    waiting, state, error = 0, State.CREATED, None
    for dep in deps:
        ok = verdict(when, dep.state)
        if ok is None:
            waiting += 1
        elif ok is False and error is None:
            state, error = State.CANCELLED, broken(dep.execution_id, dep.state)
    execution = make(
        (
            execution_id,
            d.take_seq(),
            input_json,
            rank,
            submission._flow_keys(record, input_json, item.key, index, count),
            tuple(e.execution_id for e in deps),
            when,
            0 if error is not None else waiting,
            state,
            error,
            dependencies.DEPENDENCY if error is not None else "",
        )
    )
    traces = d.events.traces
    return execution if traces is None else traces.accepted(execution)


def _order(edges: list[tuple[int, ...]]) -> list[int]:
    """The items in an order where each comes after those it waits for (the graph has no cycle)."""
    order, placed = [], [False] * len(edges)
    for start in range(len(edges)):
        stack = [start]
        while stack:
            node = stack[-1]
            if placed[node]:
                stack.pop()
                continue
            todo = [j for j in edges[node] if not placed[j]]
            if todo:
                stack.extend(todo)
            else:
                placed[node] = True
                order.append(node)
                stack.pop()
    return order
