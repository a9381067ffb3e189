"""The contract between the core and the parts it drives: what they may read and call of it.

The transitions (``transitions/``), the pass (``cycle/placing.py``), the reads that need more
than the store (``reads/``), the pool book and the modes (``modes/``) are handed the dispatcher
as a ``Handle``, never the ``Dispatcher`` class: none of them imports the core, so the core is
the only module that knows them all (no import cycle), and a mode can be read against this
page rather than against the core.

Also here, for the same reason: the three strategies a mode injects (``Binder``,
``PendingFeed``, ``FleetDirectory``; their local forms are in ``modes/local.py``, the replicas'
in ``modes/shared/``).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from flux.dispatcher.cycle.passes import Passes
    from flux.dispatcher.state.catalogue import Catalogue
    from flux.dispatcher.state.deadlines import Kind, Timers
    from flux.dispatcher.state.dependencies import DependencyIndex
    from flux.dispatcher.state.flow import FlowUsage
    from flux.dispatcher.state.freezing import Freezer
    from flux.dispatcher.state.lifecycle import Lifecycle
    from flux.dispatcher.state.named_limits import LimitBook
    from flux.dispatcher.state.pings import Pinger
    from flux.dispatcher.state.quotas import TenantUsage
    from flux.dispatcher.state.registry import WorkerRegistration, WorkerRegistry
    from flux.dispatcher.state.settings import Settings
    from flux.dispatcher.state.table import ExecutionTable
    from flux.dispatcher.state.tenants import TenantDirectory
    from flux.dispatcher.state.watchers import Watchers
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.domain.execution import Execution, ExecutionError
    from flux.domain.tenant import Tenant
    from flux.matching import Aging, FeasibilityCache, PendingQueue, Placement, Shape
    from flux.matching.pools import PoolDemand
    from flux.store import Store


@runtime_checkable
class Reclaiming(Protocol):
    """What the transitions ask of preemption (``reclaim.Reclaimer``)."""

    def reclaim(self, shapes: list[Shape] | None = None) -> int: ...

    def is_stopping(self, execution: Execution) -> bool: ...

    def stopped(self, execution: Execution) -> Execution: ...

    def lost(self, preemptor: str) -> None: ...

    def expire(self, now: float) -> bool: ...

    def preview(self, execution_id: str, shape: Shape, viewer: str = "") -> str: ...

    def withdraw(self, preemptor: str) -> None: ...

    def refused(self, execution_id: str, lane: Shape) -> None: ...


class Moving(Protocol):
    """What the transitions ask of moving queued work to idle workers (``moving.Mover``)."""

    def soon(self, entry: WorkerEntry) -> None: ...


class Housekeeping(Protocol):
    """What the transitions ask of the periodic tick's owner (``housekeeping.Housekeeper``)."""

    mover: Moving


@runtime_checkable
class Timekeeping(Protocol):
    """What the transitions ask of an execution's clocks (``timing.Timing``): timeouts, heartbeats,
    retries' waits and the pending deadline."""

    def submitted(self, execution: Execution) -> None: ...

    def claimed(self, running: Execution) -> None: ...

    def recovered(self, execution: Execution) -> None: ...

    def heartbeat(self, execution: Execution, details_json: str) -> None: ...

    def fire(self, kind: Kind, execution_id: str, token: int, now: float) -> bool: ...

    def is_stopping(self, execution: Execution) -> bool: ...

    def stopped(self, execution: Execution) -> Execution: ...

    def connected(self, entry: WorkerEntry) -> None: ...

    def forget(self, execution_id: str) -> None: ...


@runtime_checkable
class Infeasible(Protocol):
    """What the transitions ask of ``--infeasible-after`` (``infeasible.Infeasibility``)."""

    def changed(self) -> None: ...

    def fire(self, token: int) -> bool: ...


@runtime_checkable
class Pooling(Protocol):
    """What explain asks of the pools (``state.pools.PoolBook``)."""

    async def demand(self, dispatcher: Handle) -> dict[str, PoolDemand]: ...

    def could_run(self, shape: Shape, demand: dict[str, PoolDemand]) -> str: ...


@runtime_checkable
class Handle(Protocol):
    """The dispatcher as its parts see it (``core.Dispatcher`` is the one implementation)."""

    # State: what is known of executions, workers, tenants and workflows.
    store: Store
    table: ExecutionTable
    queue: PendingQueue
    aging: Aging
    feasibility: FeasibilityCache
    catalogue: Catalogue
    registry: WorkerRegistry
    timers: Timers
    watchers: Watchers
    usage: TenantUsage
    flow: FlowUsage
    dependencies: DependencyIndex
    limits: LimitBook
    tenants: TenantDirectory
    events: Lifecycle
    clock: Callable[[], float]
    # The injected modes, and the services the housekeeping tick drives.
    binder: Binder
    feed: PendingFeed
    fleet: FleetDirectory
    pools: Pooling
    reclaimer: Reclaiming
    passes: Passes
    timing: Timekeeping
    infeasibility: Infeasible
    freezer: Freezer
    pinger: Pinger
    housekeeper: Housekeeping

    @property
    def settings(self) -> Settings: ...

    # Scheduling: a pass (``passes`` decides when; a direct call is for the passes it cannot
    # name: preemption's scoped pass, the shared binder's fast path that binds on its own).
    def place(
        self,
        shapes: list[Shape] | None = None,
        workers: Iterable[WorkerEntry] | None = None,
        starving_first: bool = True,
        only: bool = False,
    ) -> int: ...

    def reserve(
        self,
        shapes: list[Shape] | None,
        workers: Iterable[WorkerEntry] | None,
        starving_first: bool = True,
        only: bool = False,
    ) -> list[Placement]: ...

    def apply(self, results: list[Bound]) -> None: ...

    # Executions in and out of the queue.
    def take_seq(self, count: int = 1) -> int: ...

    def queue_up(self, execution: Execution, shape: Shape) -> None: ...

    def current(self, execution_id: str) -> Execution | None: ...

    async def get(self, execution_id: str) -> Execution: ...

    def apply_tenants(self, tenants: list[Tenant]) -> None: ...

    def pending(self) -> PendingQueue: ...

    async def fleet_workers(self) -> list[WorkerEntry]: ...

    def retrying_soon(self, within: float) -> dict[Shape, int]: ...


@runtime_checkable
class Binder(Protocol):
    def attach(self, d: Handle) -> None: ...

    async def submit(self, execution: Execution) -> None:
        """Store a new execution (durable before the answer) and queue or dispatch it."""

    def queue_unwritten(self, execution: Execution) -> bool:
        """Queue or dispatch a new execution before its row is written, when this binder may; its
        caller writes it before telling anyone it exists. False: ``submit`` it instead."""

    async def submit_many(self, executions: list[Execution]) -> None:
        """Store new executions in one commit (durable before the answer), then queue them and place them."""

    def bind(self, placements: list[Placement]) -> Binding:
        """Make placements reserved on their workers this server's to dispatch: one ``Bound`` per
        placement, in order; the cycle applies them (pushes, or unreserves and drops or requeues)."""

    def place_released(self, execution: Execution) -> bool:
        """``execution`` was released by its last dependency: its row (``waiting`` 0) is queued for
        the commit of that dependency's final state. True when it was placed and is bound in that
        same commit (pushed once it lands); False: it is queued once the row is committed."""

    async def recovered(self, pending: list[Execution]) -> None:
        """Executions found pending at start, each a generation past any dispatch before the
        restart, are about to be queued: make that generation durable where dispatches are not."""

    def worker_lost(self, entry: WorkerEntry) -> None:
        """``entry`` is about to be lost: let go of what is still in flight on it."""

    async def cancel(self, execution_id: str) -> Execution:
        """Cancel an execution wherever it is; the final state is committed before the answer."""

    async def cancel_many(self, execution_ids: list[str]) -> None:
        """Cancel each (a batch's members), committed before this returns; one finished meanwhile
        or gone is left as it is."""

    def fail_waiting(self, execution: Execution, error: ExecutionError) -> None:
        """End a waiting execution FAILED, reason ``pending_timeout`` (its pending timeout passed, or
        ``--infeasible-after``): at once on one server; on replicas, each of which may decide it,
        only if its row is still CREATED at its generation, so it ends once."""

    def quotas(self, governed: bool) -> None:
        """Tenants' terms now govern placement (or no longer do)."""

    def preempt(self, preemptor: str, act: Callable[[], None]) -> None:
        """Call ``act`` (stop the victims planned for ``preemptor``) once this server may: at once on
        one server; on replicas once no other replica preempts for it (flux/store/postgres/quota.py)."""


class Outcome(enum.Enum):
    """What became of one placement the binder was given."""

    BOUND = "bound"  # this server's to dispatch: ``Bound.row`` is the SCHEDULED row to push
    LOST = "lost"  # another replica has it, or it was cancelled: unreserve, forget it here
    REFUSED = "refused"  # the tenant's quota refused it cluster-wide: unreserve, back in line
    FAILED = "failed"  # the bind itself failed (the database): unreserve, back in line, no pass now


@dataclass(frozen=True, slots=True)
class Bound:
    placement: Placement
    outcome: Outcome
    row: Execution | None = None  # the SCHEDULED row, when BOUND


# Bound at once (one server), or when the claim lands (replicas).
Binding = list[Bound] | asyncio.Future[list[Bound]]


@runtime_checkable
class PendingFeed(Protocol):
    # Every change of an execution reaches its watchers from this server (one server): a wait
    # needs no reread and no wake-up.
    changes_pushed: bool

    def attach(self, d: Handle) -> None: ...

    async def before_start(self) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def next_seq(self, next_seq: int) -> int:
        """The sequence number of a new submission, at least ``next_seq`` (it orders the queue)."""

    def authoritative(self, execution: Execution) -> bool:
        """Whether what this server holds of ``execution`` may answer a read."""

    async def learn_workflows(self) -> None:
        """Reload workflows another server may have registered."""

    async def next_change(
        self, execution_id: str, updates: asyncio.Queue[Execution], current: Execution
    ) -> Execution:
        """The next state a watcher of ``execution_id`` should see (``current`` when none yet)."""


@runtime_checkable
class FleetDirectory(Protocol):
    def attach(self, d: Handle) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def serving(self, address: str) -> None: ...

    async def entries(self) -> list[WorkerEntry]:
        """Every worker of the fleet, by name: what ``explain``, ``status`` and listings count."""

    async def before_register(self, registration: WorkerRegistration) -> None: ...

    async def registered(self, name: str) -> None: ...

    def connected(self, entry: WorkerEntry) -> None: ...

    def disconnected(self, entry: WorkerEntry) -> None: ...

    async def forget(self, name: str) -> int: ...

    async def set_paused(self, name: str, paused: bool) -> WorkerEntry: ...


@dataclass(frozen=True, slots=True)
class Modes:
    binder: Binder
    feed: PendingFeed
    fleet: FleetDirectory
