"""One of several server replicas sharing a PostgreSQL database: the shared strategies.

The matching is the same as on a single server (``Dispatcher``); what changes
is who may act on an execution, and that is all injected (``shared(store)``):

- **Pending work is shared** (``SharedFeed``). Each replica mirrors the queue
  of CREATED rows (announced by ``NOTIFY flux_pending``, reread on every safety
  tick) and places it on *its own* workers.
- **Placements are claimed** (``SharedBinder``). A placement is reserved
  locally at once, then claimed in the database (``SELECT … FOR UPDATE SKIP
  LOCKED``); only a claimed row is sent to the worker. A row another replica
  claimed first is dropped from the mirror and the reservation is freed.
- **A worker belongs to the replica holding its stream** (``SharedFleet``),
  and so do the executions dispatched to it; that replica alone reserves the
  worker's resources, so capacity holds across replicas. A worker that
  reconnects to another replica is *adopted* there with its executions; the old
  replica hears ``NOTIFY flux_workers`` and lets go. Every replica publishes its
  workers to the database directory, so each sees (explains against, counts in
  status) the whole fleet.
- **Writes are guarded.** A write to an owned row that someone else changed
  fails with ``Conflict``, and this replica drops the execution
  (``Dispatcher.drop_stale``, through the table's one save path).
- **Dead replicas are swept.** Replicas heartbeat; one live replica at a time
  requeues the work of replicas silent for longer than the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from flux.dispatcher.directory import entry_of, info_of, load_of
from flux.dispatcher.limits import name_held, same_token
from flux.dispatcher.modes import Modes
from flux.dispatcher.registry import WorkerRegistration, placeholder
from flux.dispatcher.workers import WorkerEntry
from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef
from flux.errors import AlreadyExists, FailedPrecondition, NotFound, Unavailable
from flux.store import notices
from flux.store.base import PendingRef

if TYPE_CHECKING:
    from flux.dispatcher.core import Dispatcher
    from flux.matching import Placement
    from flux.store.postgres import PostgresStore

log = logging.getLogger("flux.replica")

HEARTBEAT = 1.0
# A replica silent this long is presumed dead (its workers' streams are gone with it).
REPLICA_TIMEOUT = 5.0
# How often a watcher of an execution held by another replica rereads it, besides NOTIFY wake-ups.
WATCH_POLL = 1.0
# After a failed requeue write, try again this much later.
REQUEUE_RETRY = 1.0


def shared(store: PostgresStore) -> Modes:
    """The strategies of one replica among several on ``store``'s database."""
    tasks = Background()
    binder = SharedBinder(store)
    fleet = SharedFleet(store, tasks, binder)
    return Modes(binder, SharedFeed(store, tasks, binder, fleet), fleet)


class Background:
    """Fire-and-forget database calls, logged when they fail and cancelled at stop."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()


# ----------------------------------------------------------------- binding


class SharedBinder:
    """Reserve here, claim in the database, then push; unreserve on a miss."""

    d: Dispatcher

    def __init__(self, store: PostgresStore):
        self.store = store
        # Placed and reserved here, claim in flight: neither pending nor dispatched yet.
        self.claiming: set[str] = set()

    def attach(self, d: Dispatcher) -> None:
        self.d = d

    def bind(self, placements: list[Placement]) -> None:
        d, now = self.d, self.d.clock()
        self.claiming.update(p.execution_id for p in placements)
        wanted = [
            d.table.unfinished[p.execution_id].evolve(
                state=State.SCHEDULED, worker=p.worker, gpu_indices=p.gpu_indices, updated_at=now
            )
            for p in placements
        ]
        claim = self.store.claim(wanted)
        if claim.done():  # a store nobody shares answers at once: no extra loop step
            self.claimed(placements, claim)
        else:
            claim.add_done_callback(lambda future: self.claimed(placements, future))

    def claimed(self, placements: list[Placement], future: asyncio.Future[dict[str, Execution]]) -> None:
        d = self.d
        rows: dict[str, Execution] | None = None
        if future.cancelled():
            pass
        elif future.exception() is not None:
            log.error("claiming %d executions failed: %s", len(placements), future.exception())
        else:
            rows = future.result()
        freed: dict[str, WorkerEntry] = {}
        for placement in placements:
            execution_id = placement.execution_id
            self.claiming.discard(execution_id)
            entry = d.registry.get(placement.worker)
            current = d.table.get(execution_id)
            row = rows.get(execution_id) if rows is not None else None
            if row is None:
                # Unreserve. After a failed claim the safety tick retries: no hot loop against a database that is down.
                if entry is not None and entry.release(execution_id) and rows is not None:
                    freed[entry.name] = entry
                if current is not None and current.state is State.CREATED:
                    if rows is None:  # the claim itself failed: nothing changed, back in line
                        d.queue.add(execution_id, placement.shape, current.seq)
                    else:  # another replica has it, or it was cancelled
                        d.table.drop(execution_id)
                continue
            if current is None:
                # Cancelled while the claim was in flight (the cancel committed after it).
                if entry is not None and entry.release(execution_id):
                    freed[entry.name] = entry
                continue
            if entry is None or not entry.dispatchable or execution_id not in entry.holdings:
                # The worker left or moved while the claim was in flight: give the row back.
                d.table.set(row)
                d.requeue(row, entry, next_attempt=False)
                continue
            d.push(row, entry, placement)
        if freed:
            d.place(workers=freed.values())

    async def submit(self, execution: Execution) -> None:
        """Store a submission; when one of our own workers can take it now, store it already claimed.

        A new execution is invisible to the other replicas until it commits, so inserting
        it as SCHEDULED (owned here, logged in ``dispatches``) is as safe as a claim and
        saves a round trip, and no other replica races us for it. Only when older work of
        the same shape waits (first come, first served) or none of our workers fits does
        it go in as pending, for whichever replica can place it.
        """
        d, execution_id = self.d, execution.execution_id
        shape = d.catalogue.shape_of(execution)
        placement = None
        if d.queue.count(shape) == 0:
            d.table.set(execution)
            d.queue.add(execution_id, shape, execution.seq)
            placements = d.reserve([shape], None)
            if placements:
                placement = placements[0]
            else:
                d.queue.remove(execution_id)
                d.table.drop(execution_id)
        if placement is None:
            try:
                await d.store.save(execution)
            except Exception as exc:
                raise Unavailable(f"could not store the execution: {exc}") from exc
            d.events.submitted(execution)
            known = d.table.get(execution_id)
            if known is None and execution_id not in self.claiming:
                d.enqueue(execution)
            elif known is not None and known.state is State.CREATED:
                # Our own NOTIFY came back before this coroutine resumed and queued a placeholder.
                d.table.add(execution)
            return
        self.claiming.add(execution_id)
        dispatched = execution.evolve(
            state=State.SCHEDULED, worker=placement.worker, generation=1, gpu_indices=placement.gpu_indices
        )
        try:
            await self.store.insert_dispatched(dispatched)
        except Exception as exc:
            self.claiming.discard(execution_id)
            d.table.drop(execution_id)
            entry = d.registry.get(placement.worker)
            if entry is not None and entry.release(execution_id):
                d.place(workers=[entry])
            raise Unavailable(f"could not store the execution: {exc}") from exc
        d.events.submitted(execution)
        d.table.add(execution)  # counted against the pending limits like any other
        won: asyncio.Future[dict[str, Execution]] = asyncio.get_running_loop().create_future()
        won.set_result({execution_id: dispatched})
        self.claimed([placement], won)

    def requeue(self, requeued: Execution) -> None:
        # Queue it here only once the row is CREATED again: a claim before that would fail.
        d = self.d

        def saved() -> None:
            if d.table.get(requeued.execution_id) is requeued:
                shape = d.catalogue.shape_of(requeued)
                d.queue.add(requeued.execution_id, shape, requeued.seq)
                d.place(shapes=[shape])

        def retry(_: BaseException) -> None:
            asyncio.get_running_loop().call_later(REQUEUE_RETRY, again)

        def again() -> None:
            if d.table.get(requeued.execution_id) is requeued:
                self.requeue(requeued)

        d.table.save(requeued, done=saved, failed=retry)

    def worker_lost(self, entry: WorkerEntry) -> None:
        for execution_id in list(entry.holdings):
            if execution_id in self.claiming:
                entry.release(execution_id)  # claimed() gives the row back when its claim lands

    async def cancel(self, execution_id: str) -> Execution:
        try:
            cancelled = await self.store.cancel(execution_id, self.d.clock())
        except Exception as exc:
            raise Unavailable(f"could not cancel {execution_id}: {exc}") from exc
        if cancelled is None:
            current = await self.d.get(execution_id)
            if current.state is State.CANCELLED:
                return current  # a retried cancel answers the same
            raise FailedPrecondition(f"execution {execution_id} is already {current.state.label}")
        self.cancelled_elsewhere(execution_id, cancelled)
        return cancelled

    def cancelled_elsewhere(self, execution_id: str, final: Execution | None = None) -> None:
        """A cancel committed (here or on another replica): stop it here if we hold it."""
        d = self.d
        execution = d.table.get(execution_id)
        if execution is None:
            return
        final = final or execution.evolve(state=State.CANCELLED, updated_at=d.clock())
        d.stop_here(execution, final)
        d.table.committed(final)  # the database has it already
        d.watchers.wake(execution_id)


# ----------------------------------------------------------------- the shared queue


class SharedFeed:
    """Pending work announced by the database (NOTIFY), reread on each safety tick."""

    d: Dispatcher

    def __init__(self, store: PostgresStore, tasks: Background, binder: SharedBinder, fleet: SharedFleet):
        self.store = store
        self.tasks = tasks
        self.binder = binder
        self.fleet = fleet
        self._loop: asyncio.Task[None] | None = None

    def attach(self, d: Dispatcher) -> None:
        self.d = d

    async def before_start(self) -> None:
        self.store.subscribe(self.on_notice)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop().create_task(self._resync_loop())

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        self.tasks.cancel()

    def next_seq(self, next_seq: int) -> int:
        # Time-based, so submissions to different replicas interleave in the shared queue.
        return max(next_seq, time.time_ns() // 1000)

    def authoritative(self, execution: Execution) -> bool:
        # What this replica knows first-hand: executions on its own workers (the mirror may be stale).
        return execution.state is not State.CREATED

    async def learn_workflows(self) -> None:
        for record in await self.store.load_workflows():
            self.d.catalogue.learn(record)

    async def next_change(
        self, execution_id: str, updates: asyncio.Queue[Execution], current: Execution
    ) -> Execution:
        wakeup = self.d.watchers.wakeup(execution_id)
        getter = asyncio.ensure_future(updates.get())
        woken = asyncio.ensure_future(wakeup.wait())
        done, _ = await asyncio.wait({getter, woken}, timeout=WATCH_POLL, return_when=asyncio.FIRST_COMPLETED)
        wakeup.clear()
        for waiter in (getter, woken):
            waiter.cancel()
        latest = self.d.current(execution_id)
        if latest is None or getter not in done:
            # Not ours, or no news from here: the database has the last word on a final state.
            stored = await self.store.get_execution(execution_id)
            if stored is not None and (latest is None or stored.state.finished):
                latest = stored
        return latest or current

    def on_notice(self, notice: notices.Notice) -> None:
        d = self.d
        match notice:
            case notices.PendingAdded(refs):
                self.mirror(refs)
            case notices.Cancelled(execution_id):
                self.binder.cancelled_elsewhere(execution_id)
            case notices.Finished(execution_ids):
                for execution_id in execution_ids:
                    d.watchers.wake(execution_id)
            case notices.WorkerMoved(replica, epoch, name):
                if replica != self.store.replica_id and epoch > self.store.epochs.get(name, 0):
                    self.fleet.moved_away(name)
            case notices.PauseChanged(name):
                self.tasks.spawn(self.fleet.apply_pause(name))
            case notices.WorkflowsChanged(replica) if replica != self.store.replica_id:
                self.tasks.spawn(self.learn_workflows())

    def mirror(self, refs: tuple[PendingRef, ...] | list[PendingRef]) -> None:
        """Queue pending executions announced by the database (ours echo back; they are skipped)."""
        d = self.d
        shapes: dict[Any, None] = {}
        unknown: list[PendingRef] = []
        for ref in refs:
            if ref.execution_id in d.table or ref.execution_id in self.binder.claiming:
                continue
            record = d.catalogue.get(ref.workflow_name, ref.workflow_version)
            if record is None:
                unknown.append(ref)
                continue
            execution = Execution(
                execution_id=ref.execution_id,
                workflow=WorkflowRef(record.name, record.version, record.source_hash, record.entrypoint),
                seq=ref.seq,
                input_json="",  # not needed to place it; the claim returns the whole row
                max_attempts=record.max_attempts,
            )
            d.table.set(execution)
            shape = d.catalogue.shape_of(execution)
            d.queue.add(ref.execution_id, shape, ref.seq)
            shapes[shape] = None
        if shapes:
            d.place(shapes=list(shapes))
        if unknown:
            self.tasks.spawn(self._mirror_after_reload(unknown))

    async def _mirror_after_reload(self, refs: list[PendingRef]) -> None:
        await self.learn_workflows()
        self.mirror([r for r in refs if self.d.catalogue.get(r.workflow_name, r.workflow_version)])

    async def resync(self) -> None:
        """Reread the shared queue: covers a missed NOTIFY, and drops rows claimed elsewhere."""
        d = self.d
        before = {e.execution_id for e in d.table.values() if e.state is State.CREATED}
        pending = await self.store.pending_refs()
        listed = {ref.execution_id for ref in pending}
        for execution_id in before - listed:
            current = d.table.get(execution_id)
            if (
                current is not None
                and current.state is State.CREATED
                and execution_id not in self.binder.claiming
            ):
                d.table.drop(execution_id)
                d.queue.remove(execution_id)
        self.mirror(pending)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.d.settings.safety_tick)
            try:
                await self.resync()
            except Exception:  # the next tick tries again
                log.exception("rereading the shared queue failed")


# ----------------------------------------------------------------- the fleet


class SharedFleet:
    """This replica's workers, published to the database directory beside every other replica's."""

    d: Dispatcher

    def __init__(self, store: PostgresStore, tasks: Background, binder: SharedBinder):
        self.store = store
        self.tasks = tasks
        self.binder = binder
        self._loop: asyncio.Task[None] | None = None

    def attach(self, d: Dispatcher) -> None:
        self.d = d
        # Its stream may be moving here from another replica: the worker retries until it registers.
        d.registry.unknown = lambda name: Unavailable(
            f"worker {name!r} is not connected to this replica; reconnect and register"
        )

    async def serving(self, address: str) -> None:
        await self.store.announce(address)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def entries(self) -> list[WorkerEntry]:
        local = self.d.registry.sorted()
        names = {w.name for w in local}
        directory = await self.store.directory(REPLICA_TIMEOUT)
        remote = [entry_of(name, info) for name, info in directory if name not in names]
        return sorted(local + remote, key=lambda w: w.name)

    async def before_register(self, registration: WorkerRegistration) -> None:
        name, token = registration.name, registration.session_token
        entry = self.d.registry.get(name)
        if entry is not None and token and same_token(token, entry.session_token):
            return
        record = await self.store.get_worker(name, REPLICA_TIMEOUT)
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
            await self.store.give_back_worker(name, self.d.clock(), error)

    async def registered(self, name: str) -> None:
        await self.apply_pause(name)  # paused through any replica, before it moved here

    def connected(self, entry: WorkerEntry) -> None:
        self.tasks.spawn(self.store.set_worker_connected(entry.name, True, info_of(entry), load_of(entry)))

    def disconnected(self, entry: WorkerEntry) -> None:
        self.tasks.spawn(self.store.set_worker_connected(entry.name, False, None, None))

    async def forget(self, name: str) -> int:
        """Drop a worker wherever its stream is: the database requeues its work and tells its replica."""
        error = ExecutionError("WorkerLost", f"worker {name} was forgotten by an operator")
        try:
            given_back = await self.store.forget_worker(name, self.d.clock(), error)
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
        if not await self.store.set_worker_paused(name, paused):
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
            self.d.registry.pause(entry, await self.store.worker_paused(name))

    async def _adopt(self, name: str, session_token: str) -> None:
        """Take over a worker (and what it holds) whose stream was on another replica."""
        d = self.d
        held = await self.store.adopt_worker(name, session_token)
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
                d.deadlines.start(execution_id, execution.generation, now + d.settings.ack_deadline)
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
                await self.store.heartbeat({e.name: load_of(e) for e in d.registry.values() if e.connected})
                now = d.clock()
                if now - last_sweep >= d.settings.safety_tick:
                    last_sweep = now
                    swept = await self.store.sweep(REPLICA_TIMEOUT + d.settings.grace_period, now)
                    if swept:
                        log.warning("requeued %d executions of stopped replicas", len(swept))
            except Exception:  # the next heartbeat tries again; a missed one only ages us
                log.exception("replica heartbeat failed")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("replica background task failed: %s", task.exception())
