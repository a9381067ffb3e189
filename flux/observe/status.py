"""One snapshot of a dispatcher: fleet, pending work by shape, executions by state, counters.

``StatusBoard.snapshot`` answers both ``GetStatus`` (with worker entries and
one row per pending shape) and ``GetMetrics`` (aggregates only). Everything is
read in one synchronous step, so the numbers agree with each other; then each
pending shape is explained against the worker views taken in that step.

The reason bucket of a shape is what ``ExplainExecution`` would say for any of
its executions: the same ``flux.matching.explain`` over the same workers (the
connected, non-draining ones, paused or not, from the same fleet directory
``Dispatcher.why`` reads: with replicas, the workers of every replica), so the
pending-by-reason gauge never disagrees with ``flux execution explain``.
A snapshot costs O(unfinished executions + shapes x workers). ``GetMetrics``
needs no token, so ``aggregate`` answers from a snapshot up to ``max_age``
seconds old and takes at most one at a time: a caller polling it in a loop
cannot make the core redo the work on every call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flux.dispatcher.state.lifecycle import Counters, Histogram, Lifecycle
from flux.domain.execution import State
from flux.domain.tenant import Limits
from flux.matching import Shape, WorkerView, explain
from flux.matching.flow import FlowControl
from flux.matching.pools import PoolDemand
from flux.matching.tenancy import Accounts, Vector, sub

if TYPE_CHECKING:
    from flux.dispatcher.core import Dispatcher
    from flux.dispatcher.state.worker_entry import WorkerEntry

BUSY, INFEASIBLE, NO_WORKER = "busy", "infeasible", "no_worker"
REASONS = (BUSY, INFEASIBLE, NO_WORKER)
TRANSPORTS = ("grpc", "sse")
# Rows of GetStatus's pending table; the rest are counted in `pending_shapes_omitted`.
MAX_SHAPES = 100
# Workers GetStatus lists; a larger fleet is summarised (`workers_omitted`): listing 10,000
# cost 12 µs each and megabytes, and ListWorkers pages through them instead.
STATUS_WORKERS = 100
# Seconds of explaining before letting the dispatch path run again.
_SLICE = 0.005


@dataclass(frozen=True, slots=True)
class Allocation:
    cpu: int = 0
    memory: int = 0
    disk: int = 0
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class Fleet:
    connected_by_transport: dict[str, int]
    disconnected: int
    draining: int
    allocatable: Allocation
    reserved: Allocation
    active_executions: int
    capacity: int
    # What the matcher counts as free on the connected workers (as explain quotes it).
    free: Allocation = Allocation()


@dataclass(frozen=True, slots=True)
class PendingShape:
    shape: Shape
    count: int
    oldest_execution_id: str
    oldest_workflow: str
    oldest_wait: float  # seconds since its submission
    summary: str
    reason: str
    # The worker aging nominated for the oldest one, if it waited past --starvation-after.
    nominated_worker: str = ""


@dataclass(frozen=True, slots=True)
class Status:
    now: float
    started_at: float
    # Live registry entries, empty unless detail was asked for; convert them promptly.
    workers: tuple[WorkerEntry, ...]
    pending: tuple[PendingShape, ...]  # empty unless detail was asked for
    pending_shapes_omitted: int
    pending_by_reason: dict[str, int]
    fleet: Fleet
    executions: dict[State, int]
    counters: Counters
    latency: dict[str, Histogram]
    # Workers not in ``workers``: a fleet over STATUS_WORKERS is summarised (``fleet``), not listed.
    workers_omitted: int = 0
    # Worker pools with the demand on each, from the same fleet and queue as the rest.
    pools: tuple[PoolDemand, ...] = ()
    # Each tenant (name, usage, quota, pending), while any tenant has terms (flux.dispatcher.state.quotas).
    tenants: tuple[tuple[str, Vector, Limits, int], ...] = ()
    # Each flow-control limit (name, in use, waiting, rate limited so far), summed over its keys.
    limits: tuple[tuple[str, int, int, int], ...] = ()
    # The server's placement policy (--placement), for workflows that name none.
    placement: str = "spread"
    # Schedules' ticks since start by result (fired, skipped, queued, missed, manual, refused), and
    # how many schedules are active and paused.
    schedule_ticks: tuple[tuple[str, int], ...] = ()
    schedules: tuple[int, int] = (0, 0)
    # Executions held out of the queue, waiting for their dependencies.
    dependencies_waiting: int = 0


def limit_totals(control: FlowControl) -> tuple[tuple[str, int, int, int], ...]:
    """Per limit: in use, waiting, and times rate limited, summed over its keys (O(budgets held))."""
    totals: dict[str, list[int]] = {}
    for gate, in_use, waiting in control.usage():
        row = totals.setdefault(gate.limit, [0, 0, 0])
        row[0] += in_use
        row[1] += waiting
    for limit, count in control.rate_limited.items():
        totals.setdefault(limit, [0, 0, 0])[2] = count
    return tuple((name, *row) for name, row in sorted(totals.items()))  # type: ignore[misc]


def reason_of(workers: int, infeasible: bool) -> str:
    """The bucket for an explanation over ``workers`` dispatchable workers."""
    if workers == 0:
        return NO_WORKER
    return INFEASIBLE if infeasible else BUSY


def fleet_of(entries: list[WorkerEntry]) -> Fleet:
    connected = dict.fromkeys(TRANSPORTS, 0)
    disconnected = draining = active = capacity = 0
    cpu = memory = disk = gpus = 0
    held_cpu = held_memory = held_disk = held_gpus = 0
    free_cpu = free_memory = free_disk = free_gpus = 0
    for entry in entries:
        held = entry.reserved
        held_cpu, held_memory, held_disk = (
            held_cpu + held.cpu,
            held_memory + held.memory,
            held_disk + held.disk,
        )
        held_gpus += len(entry.held_gpus)
        active += entry.active
        if not entry.connected:
            disconnected += 1
            continue
        connected[entry.transport] = connected.get(entry.transport, 0) + 1
        draining += entry.draining
        capacity += entry.capacity
        view = entry.view()
        free_cpu, free_memory, free_disk, free_gpus = (
            free_cpu + view.free_cpu,
            free_memory + view.free_memory,
            free_disk + view.free_disk,
            free_gpus + len(view.free_gpus),
        )
        r = entry.resources
        cpu, memory, disk, gpus = (
            cpu + r.cpu_total,
            memory + r.memory_total,
            disk + r.disk_total,
            gpus + len(r.gpus),
        )
    return Fleet(
        connected_by_transport=connected,
        disconnected=disconnected,
        draining=draining,
        allocatable=Allocation(cpu, memory, disk, gpus),
        reserved=Allocation(held_cpu, held_memory, held_disk, held_gpus),
        active_executions=active,
        capacity=capacity,
        free=Allocation(free_cpu, free_memory, free_disk, free_gpus),
    )


def _copy(lifecycle: Lifecycle) -> tuple[Counters, dict[str, Histogram]]:
    c = lifecycle.counters
    counters = dataclasses.replace(
        c,
        requeued=dict(c.requeued),
        preempted=dict(c.preempted),
        preemptions_refused=dict(c.preemptions_refused),
        preemptions_refused_by_tenant=dict(c.preemptions_refused_by_tenant),
        retries=dict(c.retries),
        timeouts=dict(c.timeouts),
    )
    latency = {}
    for stage, histogram in lifecycle.latency.items():
        copy = Histogram(histogram.bounds)
        copy.counts, copy.sum, copy.count = list(histogram.counts), histogram.sum, histogram.count
        copy.exemplars = dict(histogram.exemplars)
        latency[stage] = copy
    return counters, latency


class StatusBoard:
    """Snapshots of one dispatcher; the aggregate one is shared for a short while."""

    def __init__(self, dispatcher: Dispatcher, monotonic: Callable[[], float] = time.monotonic):
        self.dispatcher = dispatcher
        self._monotonic = monotonic
        self._aggregate: tuple[float, Status] | None = None  # (taken at, snapshot)
        self._taking: asyncio.Future[Status] | None = None

    async def aggregate(self, max_age: float) -> Status:
        """A snapshot without workers or shapes, taken at most ``max_age`` seconds ago."""
        cached = self._aggregate
        if cached is not None and self._monotonic() - cached[0] <= max_age:
            return cached[1]
        if self._taking is None:
            self._taking = asyncio.ensure_future(self._take_aggregate())
        # Shielded: a caller that goes away does not cancel the snapshot the others wait for.
        return await asyncio.shield(self._taking)

    async def _take_aggregate(self) -> Status:
        try:
            status = await self.snapshot(detail=False)
            self._aggregate = (self._monotonic(), status)
            return status
        finally:
            self._taking = None

    async def snapshot(self, detail: bool = True, scope: str = "") -> Status:
        """The dispatcher now; with ``scope`` (a tenant's name) the pending rows are that tenant's only.

        A row names its oldest execution and workflow and explains it: another tenant's are not
        for a tenant's token to read. Counts over every tenant (``pending_by_reason``, executions by
        state) stay, as they name nobody.
        """
        d = self.dispatcher
        # The fleet first (with replicas, a database read): the same one explain counts.
        entries = await d.fleet_workers()
        await d.pools.refresh()  # with replicas, pools applied through another one
        # ---- one synchronous step: every number below describes the same moment
        now = d.clock()
        views: list[WorkerView] = [w.view() for w in entries if w.accepting]  # paused ones too, as explain
        queue = d.pending()
        aging = d.aging
        shapes = queue.shapes()
        heads: dict[str, Shape] = {}
        for shape in shapes:
            # The oldest, not the first in line: with priorities they differ, and aging looks at the oldest.
            head = queue.oldest(shape)
            if head is not None:
                heads[head.execution_id] = shape
        counts = {shape: queue.count(shape) for shape in shapes}
        executions = dict.fromkeys((State.CREATED, State.SCHEDULED, State.RUNNING), 0)
        oldest: dict[Shape, tuple[str, str, float, str]] = {}
        for execution in d.unfinished():
            executions[execution.state] = executions.get(execution.state, 0) + 1
            shape = heads.get(execution.execution_id)
            if shape is not None:
                oldest[shape] = (
                    execution.execution_id, execution.workflow.name, execution.created_at, execution.tenant
                )  # fmt: skip
        counters, latency = _copy(d.events)
        executions[State.COMPLETED] = counters.completed
        executions[State.FAILED] = counters.failed
        executions[State.CANCELLED] = counters.cancelled
        fleet = fleet_of(entries)
        demand = d.pools.demand_now(entries, list(counts.items()))
        pools = tuple(demand.values())
        tenants = _tenants(d.usage.accounts, counts, d.usage.reserved)
        listed = detail and len(entries) <= STATUS_WORKERS
        workers = tuple(entries) if listed else ()

        # ---- explain each shape against the views taken above (they are immutable)
        by_reason = dict.fromkeys(REASONS, 0)
        rows: list[PendingShape] = []
        slice_started = self._monotonic()
        for shape in shapes:
            # The same call as Dispatcher.why makes for one execution of this shape.
            head_id = oldest[shape][0] if shape in oldest else ""
            explanation = explain(shape, views, execution_id=head_id, aging=aging, now=now)
            summary = explanation.summary
            if explanation.capable == 0 and demand:  # as Dispatcher.why says it: which pool could run it
                could = d.pools.could_run(shape, demand)
                summary = f"{summary}; {could}" if could else summary
            reason = reason_of(len(explanation.verdicts), explanation.infeasible)
            by_reason[reason] += counts[shape]
            # The row's tenant is its oldest execution's (a shape is one tenant's lane).
            if detail and shape in oldest and (not scope or oldest[shape][3] == scope):
                execution_id, workflow, created_at, _ = oldest[shape]
                rows.append(
                    PendingShape(
                        shape,
                        counts[shape],
                        execution_id,
                        workflow,
                        max(0.0, now - created_at),
                        summary,
                        reason,
                        explanation.nominated,
                    )
                )
            if self._monotonic() - slice_started > _SLICE:
                await asyncio.sleep(0)  # a big fleet times many shapes: let dispatching run
                slice_started = self._monotonic()
        rows.sort(key=lambda row: (-row.count, -row.oldest_wait))
        return Status(
            now=now,
            started_at=d.events.started_at,
            workers=workers,
            pending=tuple(rows[:MAX_SHAPES]),
            pending_shapes_omitted=max(0, len(rows) - MAX_SHAPES),
            pending_by_reason=by_reason,
            fleet=fleet,
            executions=executions,
            counters=counters,
            latency=latency,
            workers_omitted=len(entries) if detail and not listed else 0,
            pools=pools,
            tenants=tenants,
            limits=limit_totals(d.flow.control),
            placement=d.settings.placement,
            schedule_ticks=tuple(sorted((k, v) for k, v in d.ticker.counts.items() if v)),
            schedules=(d.schedules.summary()["active"], d.schedules.summary()["paused"]),
            dependencies_waiting=len(d.dependencies),
        )


def _tenants(
    accounts: Accounts | None, counts: dict[Shape, int], reserved: Mapping[str, tuple[str, Vector]]
) -> tuple[tuple[str, Vector, Limits, int], ...]:
    """Every tenant with terms or pending work: what its scheduled and running executions hold (not
    what is reserved for a preemption under way), its nominal quota and pending count."""
    if accounts is None:
        return ()
    pending: dict[str, int] = dict.fromkeys(accounts.terms, 0)
    for shape, count in counts.items():
        pending[shape.tenant] = pending.get(shape.tenant, 0) + count
    held = {name: accounts.used(name) for name in pending}
    for tenant, amount in reserved.values():
        if tenant in held:
            held[tenant] = sub(held[tenant], amount)
    return tuple((name, held[name], accounts.tenant(name).quota, pending[name]) for name in sorted(pending))
