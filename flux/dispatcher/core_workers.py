"""The Dispatcher's methods the worker side calls (worker_service.py, the gateway's worker routes):
register, connect and disconnect, report, claim, complete, release, heartbeat; and the fleet as
a client sees it. A mixin of ``Dispatcher`` (core.py), its own module so that core.py keeps the
orchestration (lifecycle, submissions, placing) in one screenful; like core.py, each method hands
its work to ``transitions/`` (worker_calls.py, housekeeping.py) or to the dispatcher's state.
"""

from __future__ import annotations

from collections.abc import Sequence

from flux.dispatcher.cycle.passes import Passes
from flux.dispatcher.handle import FleetDirectory
from flux.dispatcher.state.freezing import Freezer
from flux.dispatcher.state.pings import Pinger
from flux.dispatcher.state.registry import WorkerRegistration, WorkerRegistry
from flux.dispatcher.state.session import Session
from flux.dispatcher.state.settings import Settings
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.dispatcher.transitions import housekeeping, worker_calls
from flux.dispatcher.transitions.reclaim import Reclaimer
from flux.dispatcher.transitions.timing import Timing
from flux.domain.execution import Execution, ExecutionError
from flux.domain.worker import WorkerResources, WorkerSoftware


class WorkerMethods:
    """The worker-facing half of ``Dispatcher``; the attributes below are the core's (core.py)."""

    registry: WorkerRegistry
    fleet: FleetDirectory
    freezer: Freezer
    pinger: Pinger
    reclaimer: Reclaimer
    timing: Timing
    passes: Passes
    settings: Settings

    async def register_worker(self, registration: WorkerRegistration) -> str:
        await self.fleet.before_register(registration)
        expired = self.registry.expired(registration)
        if expired is not None:  # its grace ended before the housekeeper noticed: recover its work now
            grace = self.settings.grace_period
            self.passes.work_added(housekeeping.lose_worker(self, expired, f"no stream for {grace:g}s"))
        # A pause is the operator's, by name (as a cordon is): a new process under it stays paused.
        token = await self.registry.register(registration, paused=expired is not None and expired.paused)
        await self.fleet.registered(registration.name)
        return token

    async def forget_worker(self, name: str) -> int:
        """Drop a worker now (an operator's call): its work is requeued and its name is free.

        For a worker gone for good before its grace period ends, or one that must not
        come back. A connected worker loses its stream and must register again.
        """
        return await self.fleet.forget(name)

    async def set_paused(self, name: str, paused: bool) -> WorkerEntry:
        """Pause (no new dispatches; its stream and running work stay) or resume a worker."""
        return await self.fleet.set_paused(name, paused)

    def connect(self, name: str, session_token: str, transport: str = "grpc") -> Session:
        with self.passes.together():  # the new stream's pass comes after its old queue is back
            session = self.registry.connect(name, session_token, transport)
            entry = self.registry.entries[name]
            # A worker starts every stream with an empty queue of its own: what it had queued on a
            # stream it replaced (before that stream's end reached us) goes back in line.
            self.passes.work_added(housekeeping.requeue_queued(self, entry, "a new stream"))
        self.freezer.connected()
        self.pinger.watch(session)
        self.reclaimer.connected(entry)
        self.timing.connected(entry)
        self.fleet.connected(entry)
        return session

    def disconnect(self, session: Session) -> None:
        self.registry.disconnect(session)
        entry = self.registry.get(session.worker)
        if entry is not None and entry.session is None:
            # Its queue goes back now, not after the grace: none of it ran.
            self.passes.work_added(housekeeping.requeue_queued(self, entry, "stream closed"))
            if session.overflowed:  # what it never read is gone: back in line now, placed elsewhere
                self.passes.work_added(housekeeping.requeue_unread(self, entry))
            self.fleet.disconnected(entry)

    def report(
        self,
        name: str,
        session_token: str,
        resources: WorkerResources,
        software: WorkerSoftware | None,
        draining: bool,
    ) -> None:
        self.registry.report(name, session_token, resources, software, draining)
        if draining:
            entry = self.registry.entries[name]
            if entry.queued:  # a draining worker takes nothing new: its queue goes back at once
                self.passes.work_added(housekeeping.requeue_queued(self, entry, "draining"))

    def authorize(self, name: str, session_token: str) -> WorkerEntry:
        return self.registry.authorize(name, session_token)

    def claim(self, name: str, session_token: str, execution_id: str, generation: int) -> Execution:
        return worker_calls.claim(self, name, session_token, execution_id, generation)

    async def complete(
        self,
        name: str,
        session_token: str,
        execution_id: str,
        generation: int,
        output_json: str | None,
        error: ExecutionError | None,
        resources: WorkerResources | None = None,
    ) -> Execution:
        return await worker_calls.complete(
            self, name, session_token, execution_id, generation, output_json, error, resources
        )

    def claim_batch(
        self, name: str, session_token: str, items: Sequence[tuple[str, int]]
    ) -> worker_calls.Answers:
        return worker_calls.claim_batch(self, name, session_token, items)

    async def complete_batch(
        self,
        name: str,
        session_token: str,
        items: Sequence[worker_calls.Result],
        resources: WorkerResources | None = None,
    ) -> worker_calls.Answers:
        return await worker_calls.complete_batch(self, name, session_token, items, resources)

    def release(
        self, name: str, session_token: str, execution_id: str, generation: int, reason: str
    ) -> Execution:
        return worker_calls.release(self, name, session_token, execution_id, generation, reason)

    def local_workers(self) -> list[WorkerEntry]:
        """The workers whose streams this server holds (or awaits), by name."""
        return self.registry.sorted()

    async def fleet_workers(self) -> list[WorkerEntry]:
        """Every worker a client may see (with replicas, those connected to the others too)."""
        return await self.fleet.entries()

    async def heartbeat(
        self, name: str, session_token: str, execution_id: str, generation: int, details_json: str
    ) -> None:
        worker_calls.heartbeat(self, name, session_token, execution_id, generation, details_json)
