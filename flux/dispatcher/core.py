"""The dispatcher: the one object the servers call, the async shell around the pure matcher.

It holds the state (``state/``) and hands itself to its parts as a ``Handle`` (``handle.py``):
submissions, worker calls, cancels, tenants' terms and the tick are ``transitions/``; a scheduling pass is
``cycle/placing.py`` (views → ``schedule``, pure → reserve → the mode's bind), and ``cycle/passes.py``
decides when one runs: at once and scoped (a submission tests its own shape against every worker; a worker
that connects, reports or frees room is tested against every shape), with a full pass on the safety tick.
That keeps "after each pass, no pending execution fits any worker", which is what makes scoped passes
complete. Reads that change nothing are ``reads/``. What differs between one server and replicas sharing
PostgreSQL is injected as ``Modes`` (``modes/``): the binder, the pending feed, the fleet.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable

from flux.dispatcher.core_batches import BatchMethods
from flux.dispatcher.core_workers import WorkerMethods
from flux.dispatcher.cycle import placing
from flux.dispatcher.cycle.passes import Passes
from flux.dispatcher.handle import Bound, Modes
from flux.dispatcher.modes.local import local
from flux.dispatcher.reads import diagnosis, waiting
from flux.dispatcher.reads.diagnosis import Diagnosis
from flux.dispatcher.reads.executions import list_executions, list_workflows
from flux.dispatcher.state import validation
from flux.dispatcher.state.audit import AuditTrail
from flux.dispatcher.state.catalogue import Catalogue
from flux.dispatcher.state.deadlines import Kind, Timers
from flux.dispatcher.state.dependencies import DependencyIndex
from flux.dispatcher.state.flow import FlowUsage
from flux.dispatcher.state.freezing import Freezer
from flux.dispatcher.state.lifecycle import Lifecycle
from flux.dispatcher.state.named_limits import LimitBook
from flux.dispatcher.state.pings import Pinger
from flux.dispatcher.state.pools import PoolBook
from flux.dispatcher.state.quotas import TenantUsage
from flux.dispatcher.state.registry import WorkerRegistration, WorkerRegistry
from flux.dispatcher.state.schedules import ScheduleBook
from flux.dispatcher.state.settings import Settings
from flux.dispatcher.state.table import ExecutionTable
from flux.dispatcher.state.tenants import TenantDirectory
from flux.dispatcher.state.watchers import Watchers
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.dispatcher.transitions import (
    attempts,
    cancel,
    dependencies,
    graphs,
    housekeeping,
    submission,
    terms,
)
from flux.dispatcher.transitions import workflows as workflows_module
from flux.dispatcher.transitions.infeasible import Infeasibility
from flux.dispatcher.transitions.reclaim import Reclaimer
from flux.dispatcher.transitions.ticker import Ticker, handle_of
from flux.dispatcher.transitions.timing import Timing
from flux.domain.execution import Execution, State
from flux.domain.tenant import DEFAULT_TENANT, Tenant
from flux.domain.workflow import WorkflowRecord
from flux.errors import NotFound
from flux.matching import Aging, FeasibilityCache, PendingQueue, Placement, Shape
from flux.store import ExecutionQuery, Store

__all__ = ["Diagnosis", "Dispatcher", "Settings", "WorkerRegistration"]

log = logging.getLogger("flux.dispatcher")


class Dispatcher(WorkerMethods, BatchMethods):
    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        events: Lifecycle | None = None,
        modes: Modes | None = None,
    ):
        self.store = store
        self.events = events if events is not None else Lifecycle(clock)
        self.clock = clock
        s = settings or Settings(server_id=uuid.uuid4().hex[:12])
        self.catalogue = Catalogue()
        self.watchers = Watchers()
        self.table = ExecutionTable(store, self.watchers, s)
        self.table.on_conflict = lambda execution_id: cancel.drop_stale(self, execution_id)
        # Executions waiting for others to end, out of the queue (transitions/dependencies.py).
        self.dependencies = DependencyIndex()
        self.table.on_finish = lambda final: dependencies.ended(self, final)
        # Tenants' usage for quotas and fair share; no accounts until a tenant has terms.
        self.usage = TenantUsage(self.table.get)
        # Every change that can let work run asks this for its pass (cycle/passes.py).
        self.passes = Passes(lambda **scope: self.place(**scope))
        self.registry = WorkerRegistry(
            store,
            s,
            clock,
            self.events,
            self.passes,
            self.table.generation_of,
            self.usage,
        )
        self.queue = PendingQueue()
        # Executions held out of the queue until a retry's not-before time: (shape, that time).
        self._retrying: dict[str, tuple[Shape, float]] = {}
        # Concurrency per key and rate limits: budgets the queue is admitted through (state/flow.py).
        # Named limits of the tenants, shared across workflows (state/named_limits.py).
        self.limits = LimitBook(store)
        self.flow = FlowUsage(self, clock, self.limits.find)
        self.limits.on_change = self.flow.limit_changed
        self.registry.listen(lambda execution_id, _: self.flow.held(execution_id), self.flow.release)
        # Nominated workers for executions waiting past --starvation-after (pure; kept across passes).
        self.aging = Aging(s.starvation_after)
        # Every deadline (ack, retry, timeout, heartbeat, pending, stop), fired as it comes due.
        self.timers = Timers(clock)
        self.timers.on_due = lambda now: housekeeping.timers_due(self, now)
        self.timing = Timing(self)
        self.infeasibility = Infeasibility(self)
        self.housekeeper = housekeeping.Housekeeper(self)
        self.freezer = Freezer()
        self.pinger = Pinger(lambda: self.settings.ping_interval)
        # What every (shape, worker profile) pair can ever fit, kept across passes (cycle/placing.py).
        self.feasibility = FeasibilityCache()
        self._next_seq = 1
        self.modes = modes or local()
        # Worker pools: declarations, learned shapes and the demand an autoscaler reads.
        self.pools = PoolBook(self)
        self.pools.on_declared = self.infeasibility.changed
        self.tenants = TenantDirectory(store, on_change=self.apply_tenants, unfinished=self._unfinished_of)
        # Administrative changes: who made which, when (state/audit.py).
        self.audit = AuditTrail(store)
        # Preemption: borrowed executions being stopped so a tenant gets its quota back.
        self.reclaimer = Reclaimer(self)
        # Schedules, and the ticker that fires their ticks once each (transitions/ticker.py).
        self.schedules = ScheduleBook(store, clock, self._check_workflow)
        self.ticker = Ticker(self.schedules, handle_of(self))
        self.binder, self.feed, self.fleet = self.modes.binder, self.modes.feed, self.modes.fleet
        for mode in (self.binder, self.feed, self.fleet):
            mode.attach(self)

    @property
    def settings(self) -> Settings:
        return self.registry.settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        """New limits apply from the next call on (the parts read them from here)."""
        self.table.settings = self.registry.settings = settings
        if settings.starvation_after != self.aging.after:
            self.aging = Aging(settings.starvation_after)

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        await self.feed.before_start()
        recovered = await self.store.open()
        self._next_seq = recovered.next_seq
        await self.limits.load()  # before recovery admits the pending work through them
        await housekeeping.recover(self, recovered)
        await self.pools.load()
        self.apply_tenants(await self.tenants.list())
        self.housekeeper.start()
        self.infeasibility.start()
        await self.feed.start()
        await self.fleet.start()
        await self.schedules.load()
        self.ticker.start()

    async def serving(self, address: str) -> None:
        """The server is bound to ``address`` (replicas publish it)."""
        await self.fleet.serving(address)

    async def stop(self) -> None:
        await self.ticker.stop()
        await self.fleet.stop()
        await self.feed.stop()
        await self.housekeeper.stop()
        await self.infeasibility.stop()
        self.timers.close()
        for entry in self.registry.values():
            if entry.session is not None:
                entry.session.close()
        await self.store.close()

    # ----------------------------------------------------------------- workflows

    async def register_workflows(
        self, filename: str, source: str, workflows: list[WorkflowRecord], tenant: str = DEFAULT_TENANT
    ) -> list[WorkflowRecord]:
        """Store each workflow as the next version of its name, owned by ``tenant`` (transitions/workflows.py)."""
        return await workflows_module.register(self, filename, source, workflows, tenant)

    async def get_source(self, source_hash: str) -> tuple[str, str]:
        return await workflows_module.source(self, source_hash)

    async def list_workflows(
        self, name: str = "", version: int = 0, tenant: str | None = None
    ) -> list[tuple[WorkflowRecord, int]]:
        """(version, versions of its name): the latest of every name, or every version of ``name``;
        with ``tenant``, only its own and ``default``'s."""
        return await list_workflows(self.store, name, version, tenant)

    async def _check_workflow(self, tenant: str, name: str) -> None:
        """Refuses (NotFound) a workflow ``tenant`` may not run: a schedule naming it is refused."""
        await submission.resolve(self, name, tenant)

    # ----------------------------------------------------------------- executions

    async def submit(
        self,
        workflow_name: str,
        input_json: str = "",
        version: int = 0,
        priority: int | None = None,
        trace: str = "",
        tenant: str = DEFAULT_TENANT,
        every_workflow: bool = True,
        overrides: submission.Overrides = submission.NO_OVERRIDES,
        written_later: bool = False,
    ) -> Execution:
        """``trace``: the caller's W3C context (flux/observe/tracing.py carrier), stored with the execution.
        ``every_workflow`` False: ``tenant`` may run only its own workflows and ``default``'s.
        ``overrides``: this run's timeouts and retries over the workflow's; more: submission.submit."""
        run = (workflow_name, input_json, version, priority, trace, tenant, every_workflow, overrides)
        return await submission.submit(self, *run, written_later=written_later)

    async def submit_many(
        self,
        workflow_name: str,
        inputs: list[str],
        version: int = 0,
        priority: int | None = None,
        trace: str = "",
        tenant: str = DEFAULT_TENANT,
        every_workflow: bool = True,
        overrides: submission.Overrides = submission.NO_OVERRIDES,
        batch: submission.BatchAsk = submission.NO_BATCH,
    ) -> list[Execution]:
        """One execution per input, stored in one commit, in input order (transitions/submission.py);
        ``batch``: as a new batch, or added to one (transitions/batches.py)."""
        return await submission.submit_many(
            self,
            workflow_name,
            inputs,
            version,
            priority,
            tenant=tenant,
            trace=trace,
            every_workflow=every_workflow,
            overrides=overrides,
            batch=batch,
        )

    async def submit_graph(
        self, items: list[graphs.GraphItem], trace: str = "", tenant: str = DEFAULT_TENANT,
        every_workflow: bool = True, sees: Callable[[Execution], bool] | None = None,
    ) -> list[Execution]:  # fmt: skip
        """A graph of executions that wait for each other, all stored in one commit (transitions/graphs.py)."""
        return await graphs.submit_graph(self, items, tenant, trace, every_workflow, sees)

    def take_seq(self, count: int = 1) -> int:
        """The next submission's sequence number (it orders the queue), or the first of ``count`` in a row."""
        seq = self.feed.next_seq(self._next_seq)
        self._next_seq = seq + count
        return seq

    def queue_up(self, execution: Execution, shape: Shape) -> None:
        """In line by priority, then submission; aging counts its wait from its submission.

        Not before its stored not-before time (a retry's backoff): until then a timer holds it.
        Every path into the queue (submission, requeue, recovery, a replica's mirror) comes here.
        One still waiting for its dependencies is held out of it (transitions/dependencies.py).
        """
        if execution.waiting:
            dependencies.hold(self, execution)
            return
        if execution.not_before and execution.not_before > self.clock():
            self.timers.arm(Kind.RETRY, execution.execution_id, execution.attempt, execution.not_before)
            self._retrying[execution.execution_id] = (shape, execution.not_before)
            return
        if execution.flow_keys and not self.flow.admit(execution):
            return  # waits on a budget, not in the queue: it holds no room and blocks nothing
        self.queue.add(execution.execution_id, shape, execution.seq, execution.priority, execution.created_at)

    def current(self, execution_id: str) -> Execution | None:
        """What this server may answer from memory (a replica does not trust its mirror of the queue)."""
        found = self.table.current(execution_id)
        return found if found is not None and self.feed.authoritative(found) else None

    async def with_input(self, execution: Execution) -> Execution:
        """``execution`` with its input, read from the store when only the store keeps it."""
        if execution.input_json:
            return execution
        stored = await self.store.get_input(execution.execution_id)
        if stored is None:
            log.error("execution %s has no stored input; sending null", execution.execution_id)
        return execution.evolve(input_json=stored or "null")

    async def with_upstream(self, execution: Execution) -> Execution:
        """``execution`` with its dependencies' outputs (ctx.upstream): from memory, else the store."""
        return await dependencies.with_upstream(self, execution)

    async def get(self, execution_id: str) -> Execution:
        validation.check_id(execution_id)
        found = self.current(execution_id) or await self.store.get_execution(execution_id)
        if found is None:
            raise NotFound(f"execution {execution_id!r} does not exist")
        return await self.with_input(found)

    def watch(self, execution_id: str) -> AsyncIterator[Execution]:
        """The current state, then every change, ending after a final state (reads/waiting.py)."""
        return waiting.watch(self, execution_id)

    async def cancel(self, execution_id: str) -> Execution:
        validation.check_id(execution_id)
        return await self.binder.cancel(execution_id)

    async def retry(self, execution_id: str) -> Execution:
        """Start a new attempt of a FAILED execution (``flux execution retry``; transitions/attempts.py)."""
        validation.check_id(execution_id)
        return await attempts.retry_failed(self, execution_id)

    async def why(self, execution_id: str, viewer: str = "") -> Diagnosis:
        """Where an execution is, or why it waits (reads/diagnosis.py); ``viewer``: the caller's
        tenant unless it is a cluster admin, so no other tenant is named."""
        return await diagnosis.why(self, execution_id, viewer)

    async def list_executions(self, query: ExecutionQuery) -> tuple[list[Execution], ExecutionQuery | None]:
        """A page of executions from the store, each as this server knows it now, and the next page's query."""
        return await list_executions(self.store, self.current, query)

    # ----------------------------------------------------------------- tenants

    def apply_tenants(self, tenants: list[Tenant]) -> None:
        """Tenants' terms changed (or were loaded): quotas and fair share apply from the next pass
        (transitions/terms.py). A deleted tenant's final states are no longer remembered."""
        terms.apply(self, tenants)
        self.table.forget_finished_of_tenants_not_in({t.name for t in tenants})

    async def _unfinished_of(self, tenant: str) -> int:
        """A tenant's unfinished executions: those this server holds, and those in the store
        (another replica's, or queued where this one has not loaded them)."""
        held = {e.execution_id for e in self.table.values() if e.tenant == tenant and not e.state.finished}
        query = ExecutionQuery(
            limit=10_000, tenant=tenant, states=tuple(int(s) for s in State if not s.finished)
        )
        stored = {e.execution_id for e in await self.store.list_executions(query)}
        return len(held | stored)

    # ----------------------------------------------------------------- placing

    def place(
        self,
        shapes: list[Shape] | None = None,
        workers: Iterable[WorkerEntry] | None = None,
        starving_first: bool = True,
        only: bool = False,
    ) -> int:
        """One scheduling pass (cycle/placing.py); ``passes`` decides when."""
        return placing.place(self, shapes, workers, starving_first, only)

    def reserve(
        self,
        shapes: list[Shape] | None,
        workers: Iterable[WorkerEntry] | None,
        starving_first: bool = True,
        only: bool = False,
    ) -> list[Placement]:
        return placing.reserve(self, shapes, workers, starving_first, only)

    def apply(self, results: list[Bound]) -> None:
        """What a bind said, placement by placement (cycle/placing.py): push, or unreserve."""
        placing.apply(self, results)

    def retrying_soon(self, within: float) -> dict[Shape, int]:
        """Executions waiting out a retry's backoff that may start within ``within`` seconds, by shape
        (pool demand counts them). O(executions waiting to retry); entries gone stale are dropped."""
        now, counts = self.clock(), {}
        for execution_id, (shape, not_before) in list(self._retrying.items()):
            execution = self.table.get(execution_id)
            if (
                execution is None
                or execution.state is not State.CREATED
                or execution.not_before != not_before
                or execution_id in self.queue
            ):
                del self._retrying[execution_id]
            elif not_before - now <= within:
                counts[shape] = counts.get(shape, 0) + 1
        return counts

    def pending(self) -> PendingQueue:
        return self.queue

    def unfinished(self) -> Iterable[Execution]:
        return self.table.values()
