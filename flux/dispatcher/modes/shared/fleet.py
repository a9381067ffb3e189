"""Replicas share one fleet: each holds its own workers' streams and publishes them.

The database directory lists every replica's connected workers, so ``explain``,
``status`` and the worker listing count the same fleet on every replica. A
worker that reconnects to another replica is adopted there; heartbeats keep a
replica alive, and one live replica at a time sweeps the work of dead ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from flux.dispatcher.modes.shared.worker_documents import entry_of, info_of, load_of
from flux.dispatcher.state.deadlines import Kind
from flux.dispatcher.state.registry import WorkerRegistration, placeholder
from flux.dispatcher.state.validation import name_held, same_token
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.domain.execution import ExecutionError, State
from flux.errors import AlreadyExists, NotFound, Unavailable

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.modes.shared.background import Background
    from flux.dispatcher.modes.shared.binder import SharedBinder
    from flux.store import SharedStore

log = logging.getLogger("flux.replica")

HEARTBEAT = 1.0
# A replica silent this long is presumed dead (its workers' streams are gone with it).
REPLICA_TIMEOUT = 5.0
# Seconds between prunings of the dispatches log (sooner when the retention is shorter).
PRUNE_EVERY = 300.0


class SharedFleet:
    """This replica's workers, published to the database directory beside every other replica's."""

    d: Handle

    def __init__(self, store: SharedStore, tasks: Background, binder: SharedBinder):
        self.store = store
        self.tasks = tasks
        self.binder = binder
        self._loop: asyncio.Task[None] | None = None
        self._retention: asyncio.Task[None] | None = None
        # Owned in the database, not held here, at the last audit: (execution id, generation).
        self._untracked: set[tuple[str, int]] = set()

    def attach(self, d: Handle) -> None:
        self.d = d
        # Its stream may be moving here from another replica: the worker retries until it registers.
        d.registry.unknown = lambda name: Unavailable(
            f"worker {name!r} is not connected to this replica; reconnect and register"
        )

    async def serving(self, address: str) -> None:
        await self.store.cluster.announce(address)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop.create_task(self._heartbeat_loop())
        self._retention = loop.create_task(self._retention_loop(self.d.settings.dispatch_retention))

    async def entries(self) -> list[WorkerEntry]:
        local = self.d.registry.sorted()
        names = {w.name for w in local}
        directory = await self.store.cluster.directory(REPLICA_TIMEOUT)
        remote = [entry_of(name, info) for name, info in directory if name not in names]
        return sorted(local + remote, key=lambda w: w.name)

    async def before_register(self, registration: WorkerRegistration) -> None:
        name, token = registration.name, registration.session_token
        entry = self.d.registry.get(name)
        if entry is not None and token and same_token(token, entry.session_token):
            return
        record = await self.store.cluster.get_worker(name, REPLICA_TIMEOUT)
        if record is None or record.replica == self.store.replica_id:
            return
        if token and same_token(token, record.session_token):
            await self._adopt(name, record.session_token)
        elif record.connected and record.replica_alive:
            raise AlreadyExists(
                f"worker name {name!r} is held by a live stream on another replica; pick another "
                "name, or reconnect with its session token"
            )
        else:
            # Its stream (or its replica) is gone: the name stays the worker's for its
            # grace period; after that a new process takes it over.
            frees_at = record.gone_since + self.d.settings.grace_period
            if self.d.clock() < frees_at:
                raise AlreadyExists(name_held(name, frees_at))
            error = ExecutionError("WorkerLost", f"worker {name} was replaced by a new process")
            await self.store.cluster.give_back_worker(name, self.d.clock(), error)

    async def registered(self, name: str) -> None:
        await self.apply_pause(name)  # paused through any replica, before it moved here

    def connected(self, entry: WorkerEntry) -> None:
        self.tasks.spawn(
            self.store.cluster.set_worker_connected(entry.name, True, info_of(entry), load_of(entry))
        )

    def disconnected(self, entry: WorkerEntry) -> None:
        self.tasks.spawn(self.store.cluster.set_worker_connected(entry.name, False, None, None))

    async def forget(self, name: str) -> int:
        """Drop a worker wherever its stream is: the database requeues its work and tells its replica."""
        error = ExecutionError("WorkerLost", f"worker {name} was forgotten by an operator")
        entry = self.d.registry.get(name)
        if entry is not None:
            # A claim is stored soon, not at once: store what it runs first, so the requeue in
            # the database counts the attempt it started (as the one-server path does).
            running = [e for i in entry.holdings if (e := self.d.table.get(i)) and e.state is State.RUNNING]
            await asyncio.gather(
                *(asyncio.shield(self.d.table.save(e)) for e in running), return_exceptions=True
            )
        try:
            given_back = await self.store.cluster.forget_worker(name, self.d.clock(), error)
        except Exception as exc:
            raise Unavailable(f"could not forget worker {name!r}: {exc}") from exc
        if given_back is None and self.d.registry.get(name) is None:
            raise NotFound(f"worker {name!r} is not registered")
        # Ours or not, what it held is requeued in the database and comes back through NOTIFY.
        self.moved_away(name)
        return len(given_back or ())

    async def set_paused(self, name: str, paused: bool) -> WorkerEntry:
        """Recorded in the database by name, so whichever replica holds the worker (now or
        after it moves) applies it: the holder hears ``NOTIFY flux_paused`` and rereads it."""
        if not await self.store.cluster.set_worker_paused(name, paused):
            raise NotFound(f"worker {name!r} is not known; 'flux workers list' shows the fleet")
        entry = self.d.registry.get(name)
        if entry is not None:
            self.d.registry.pause(entry, paused)
            return entry
        for listed in await self.entries():
            if listed.name == name:
                listed.paused = paused  # as its replica applies it on the notification
                return listed
        raise NotFound(f"worker {name!r} is not connected to any replica")

    async def apply_pause(self, name: str) -> None:
        entry = self.d.registry.get(name)
        if entry is not None:
            self.d.registry.pause(entry, await self.store.cluster.worker_paused(name))

    async def _adopt(self, name: str, session_token: str) -> None:
        """Take over a worker (and what it holds) whose stream was on another replica."""
        d = self.d
        held = await self.store.cluster.adopt_worker(name, session_token)
        for execution in held:
            if d.catalogue.get(execution.workflow.name, execution.workflow.version) is None:
                await d.feed.learn_workflows()
        stale = d.registry.entries.pop(name, None)
        if stale is not None and stale.session is not None:
            stale.session.close()
        now = d.clock()
        entry = d.registry.entries[name] = placeholder(name, session_token, now, last_seen=now)
        for execution in held:
            execution_id = execution.execution_id
            d.queue.remove(execution_id)
            entry.hold(execution_id, d.catalogue.record_of(execution).requests, execution.gpu_indices)
            d.table.set(execution)
            if execution.state is State.SCHEDULED:
                # The worker may never have seen this dispatch: claim it in time or it goes back.
                d.timers.arm(Kind.ACK, execution_id, execution.generation, now + d.settings.ack_deadline)
            else:  # running: its timeout and heartbeat clocks go on here
                d.timing.recovered(execution)
        log.info("adopted worker %s with %d executions from another replica", name, len(held))

    def moved_away(self, name: str) -> None:
        """Another replica adopted (or replaced) this worker: let go without requeueing its work."""
        d = self.d
        entry = d.registry.entries.pop(name, None)
        if entry is None:
            return
        if entry.session is not None:
            entry.session.close()
        for execution_id in entry.holdings:
            if execution_id not in self.binder.claiming:
                d.table.drop(execution_id)
        log.info("worker %s moved to another replica", name)

    async def _heartbeat_loop(self) -> None:
        d, last_sweep = self.d, 0.0
        while True:
            await asyncio.sleep(HEARTBEAT)
            try:
                await self.store.cluster.heartbeat(
                    {e.name: load_of(e) for e in d.registry.values() if e.connected}
                )
                now = d.clock()
                if now - last_sweep >= d.settings.safety_tick:
                    last_sweep = now
                    swept = await self.store.cluster.sweep(REPLICA_TIMEOUT + d.settings.grace_period, now)
                    if swept:
                        log.warning("requeued %d executions of stopped replicas", len(swept))
                    await self.audit(now)
            except self.store.unavailable as exc:  # the database away: the next heartbeat tries again
                log.warning(
                    "replica heartbeat failed, the database is unavailable (%s); retrying in %gs",
                    exc,
                    HEARTBEAT,
                )
            except Exception:  # a missed heartbeat only ages us
                log.exception("replica heartbeat failed")

    async def audit(self, now: float) -> None:
        """Requeue the rows this replica owns in the database but holds nowhere here.

        The sweep covers dead replicas; this covers a live one whose memory lost a row (a
        race between its own steps): a controller's reconcile, from what is stored. A row
        counts only when found on two audits in a row, a safety tick apart, so a write
        still in flight (a claim answered but not applied, a result not yet stored) is not
        taken for one; it goes back only at the generation seen, and only if still owned here.
        """
        d = self.d
        untracked = {
            (execution_id, generation)
            for execution_id, generation in await self.store.cluster.owned()
            if execution_id not in d.table and execution_id not in self.binder.claiming
        }
        stale, self._untracked = sorted(untracked & self._untracked), untracked
        if stale:
            error = ExecutionError("WorkerLost", "its replica no longer tracked it")
            given = await self.store.cluster.give_back_owned(stale, now, error)
            self._untracked -= set(stale)
            if given:
                log.warning(
                    "requeued %d executions this replica owned but no longer tracked: %s",
                    len(given),
                    ", ".join(e.execution_id for e in given),
                )

    async def _retention_loop(self, retention: float) -> None:
        """Keep the shared tables bounded: drop the dispatches of executions finished ``retention``
        ago (0: keep them), and the rate buckets full again.

        Apart from the heartbeat, so that a long first pruning never delays it past REPLICA_TIMEOUT.
        """
        every = min(PRUNE_EVERY, retention) if retention > 0 else PRUNE_EVERY
        while True:
            await asyncio.sleep(every)
            try:
                pruned = await self.store.prune_dispatches(self.d.clock() - retention) if retention > 0 else 0
                # The rate buckets of keys gone quiet: full again, so no different from no row.
                buckets = await self.store.prune_buckets()
            except Exception as exc:  # the database away: the rows wait for the next round
                log.warning("pruning the shared tables failed (%s); trying again in %gs", exc, every)
                continue
            if pruned:
                log.info("pruned %d dispatches of executions finished over %gs ago", pruned, retention)
            if buckets:
                log.info("pruned %d rate buckets full again", buckets)

    async def stop(self) -> None:
        for task in (self._loop, self._retention):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
