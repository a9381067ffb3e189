"""Where one server and replicas sharing PostgreSQL differ: three small injected strategies.

In the spirit of the Kubernetes scheduler's Reserve → Bind (Unreserve on failure):

- ``Binder``: turns reserved placements into dispatches. On one server a
  placement is this server's at once; replicas claim it in the database first
  and unreserve on a miss (replica.py).
- ``PendingFeed``: where pending work comes from besides this server's own
  submissions. One server: nowhere. Replicas: the NOTIFY mirror plus resync.
- ``FleetDirectory``: which workers exist. One server: its own. Replicas: its
  own plus those the database directory lists for the others. ``explain`` and
  ``status`` both read it, so they count the same fleet.

The local strategies are here; the shared ones are in replica.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from flux.dispatcher import bulk
from flux.dispatcher.workers import WorkerEntry
from flux.domain.execution import Execution, State
from flux.errors import NotFound

if TYPE_CHECKING:
    from flux.dispatcher.core import Dispatcher
    from flux.dispatcher.registry import WorkerRegistration
    from flux.matching import Placement


class Binder(Protocol):
    def attach(self, d: Dispatcher) -> None: ...

    async def submit(self, execution: Execution) -> None:
        """Store a new execution (durable before the answer) and queue or dispatch it."""

    async def submit_many(self, executions: list[Execution]) -> None:
        """Store new executions in one commit (durable before the answer), then queue them and place them."""

    def bind(self, placements: list[Placement]) -> None:
        """Dispatch placements already reserved on their workers (or unreserve them)."""

    def requeue(self, requeued: Execution) -> None:
        """Put an execution that went back to CREATED in line again, and save it."""

    def worker_lost(self, entry: WorkerEntry) -> None:
        """``entry`` is about to be lost: let go of what is still in flight on it."""

    async def cancel(self, execution_id: str) -> Execution:
        """Cancel an execution wherever it is; the final state is committed before the answer."""

    def quotas(self, governed: bool) -> None:
        """Tenants' terms now govern placement (or no longer do)."""

    def preempt(self, preemptor: str, act: Callable[[], None]) -> None:
        """Call ``act`` (stop the victims planned for ``preemptor``) once this server may: at once on
        one server; on replicas once no other replica preempts for it (flux/store/postgres/quota.py)."""


class PendingFeed(Protocol):
    def attach(self, d: Dispatcher) -> None: ...

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


class FleetDirectory(Protocol):
    def attach(self, d: Dispatcher) -> None: ...

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


# ----------------------------------------------------------------- one server


class LocalBinder:
    """One server owns every execution: a placement is bound the moment it is reserved."""

    d: Dispatcher

    def attach(self, d: Dispatcher) -> None:
        self.d = d

    async def submit(self, execution: Execution) -> None:
        await self.d.store_submission(execution)

    async def submit_many(self, executions: list[Execution]) -> None:
        await bulk.store_and_queue(self.d, executions)

    def bind(self, placements: list[Placement]) -> None:
        d = self.d
        now = d.clock()
        for placement in placements:
            execution = d.table.unfinished[placement.execution_id]
            # Not written to the store: after a restart an unclaimed dispatch goes
            # back to CREATED anyway, so the row stays CREATED until the claim.
            dispatched = execution.evolve(
                state=State.SCHEDULED,
                worker=placement.worker,
                generation=execution.generation + 1,
                gpu_indices=placement.gpu_indices,
                updated_at=now,
            )
            d.push(dispatched, d.registry.entries[placement.worker], placement)

    def requeue(self, requeued: Execution) -> None:
        self.d.queue_up(requeued, self.d.catalogue.shape_of(requeued))
        self.d.table.save(requeued)

    def worker_lost(self, entry: WorkerEntry) -> None:
        pass  # nothing is in flight: binding is synchronous

    async def cancel(self, execution_id: str) -> Execution:
        return await self.d.cancel_here(execution_id)

    def quotas(self, governed: bool) -> None:
        pass  # one server holds all usage: the scheduler's own check is exact

    def preempt(self, preemptor: str, act: Callable[[], None]) -> None:
        act()  # nobody else plans


class NoFeed:
    """One server: all pending work is its own."""

    def attach(self, d: Dispatcher) -> None:
        pass

    async def before_start(self) -> None:
        pass

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def next_seq(self, next_seq: int) -> int:
        return next_seq

    def authoritative(self, execution: Execution) -> bool:
        return True

    async def learn_workflows(self) -> None:
        pass

    async def next_change(
        self, execution_id: str, updates: asyncio.Queue[Execution], current: Execution
    ) -> Execution:
        return await updates.get()


class LocalFleet:
    """The workers registered with this server are the whole fleet."""

    d: Dispatcher

    def attach(self, d: Dispatcher) -> None:
        self.d = d

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def serving(self, address: str) -> None:
        pass

    async def entries(self) -> list[WorkerEntry]:
        return self.d.registry.sorted()

    async def before_register(self, registration: WorkerRegistration) -> None:
        pass

    async def registered(self, name: str) -> None:
        pass

    def connected(self, entry: WorkerEntry) -> None:
        pass

    def disconnected(self, entry: WorkerEntry) -> None:
        pass

    async def forget(self, name: str) -> int:
        return self.d.registry.forget(name)

    async def set_paused(self, name: str, paused: bool) -> WorkerEntry:
        entry = self.d.registry.get(name)
        if entry is None:
            raise NotFound(f"worker {name!r} is not known; 'flux workers list' shows the fleet")
        self.d.registry.pause(entry, paused)
        return entry


def local() -> Modes:
    return Modes(LocalBinder(), NoFeed(), LocalFleet())
