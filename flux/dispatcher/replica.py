"""One of several server replicas sharing a PostgreSQL database.

The matching is the same as on a single server (``Dispatcher``); what changes
is who may act on an execution:

- **Pending work is shared.** Each replica mirrors the queue of CREATED rows
  (announced by ``NOTIFY flux_pending``, reread on every safety tick) and
  places it on *its own* workers. A placement is reserved locally at once, then
  claimed in the database (``SELECT … FOR UPDATE SKIP LOCKED``); only a claimed
  row is sent to the worker. A row another replica claimed first is dropped
  from the mirror and the worker's reservation is freed.
- **A worker belongs to the replica holding its stream**, and so do the
  executions dispatched to it; that replica alone reserves the worker's
  resources, so capacity holds across replicas. A worker that reconnects to
  another replica (its own died, or the network moved it) is *adopted* there
  with its executions; the old replica hears ``NOTIFY flux_workers`` and lets go.
- **Writes are guarded.** A write to an owned row that someone else changed
  (cancelled through another replica, swept after this one looked dead) fails
  with ``Conflict``, and this replica forgets the execution (``_forget``).
- **Dead replicas are swept.** Replicas heartbeat; one live replica at a time
  requeues the work of replicas silent for longer than the grace period (the
  time their workers had to reconnect elsewhere and be adopted).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from types import MappingProxyType
from typing import Any

from flux.dispatcher.core import (
    Dispatcher,
    Settings,
    Why,
    WorkerRegistration,
    _check_id,
    _same_token,
    _with_input,
    name_held,
)
from flux.dispatcher.session import Cancelled, Session
from flux.dispatcher.workers import Elsewhere, WorkerEntry
from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.errors import AlreadyExists, FailedPrecondition, NotFound, Unavailable
from flux.matching import DEFAULT_CAPACITY, Amounts, Placement, Shape, WorkerView, explain
from flux.store.base import Conflict, PendingRef
from flux.store.postgres import PostgresStore, parse_pending

log = logging.getLogger("flux.replica")

HEARTBEAT = 1.0
# A replica silent this long is presumed dead (its workers' streams are gone with it).
REPLICA_TIMEOUT = 5.0
# How often a watcher of an execution held by another replica rereads it, besides NOTIFY wake-ups.
WATCH_POLL = 1.0


class ReplicaDispatcher(Dispatcher):
    store: PostgresStore

    def __init__(
        self, store: PostgresStore, settings: Settings | None = None, clock: Callable[[], float] = time.time
    ):
        super().__init__(store, settings, clock)
        self.replica_id = store.replica_id
        self._claiming: set[str] = set()
        self._wakeups: dict[str, asyncio.Event] = {}
        self._replica_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.store.subscribe(self._on_notify)
        await super().start()
        self._replica_task = asyncio.get_running_loop().create_task(self._replica_loop())

    async def serving(self, address: str) -> None:
        await self.store.announce(address)

    async def stop(self) -> None:
        if self._replica_task is not None:
            self._replica_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replica_task
        for task in list(self._background):
            task.cancel()
        await super().stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_log_failure)

    def _take_seq(self) -> int:
        # Time-based, so submissions to different replicas interleave in the shared queue.
        self._next_seq = max(self._next_seq + 1, time.time_ns() // 1000)
        return self._next_seq

    # ----------------------------------------------------------------- dispatch

    def _dispatch(
        self, shapes: list[Shape] | None = None, workers: Iterable[WorkerEntry] | None = None
    ) -> int:
        placements = self._place(shapes, workers)
        if not placements:
            return 0
        self._claiming.update(p.execution_id for p in placements)
        claim = self.store.claim(
            [(p.execution_id, p.worker, p.gpu_indices) for p in placements], self.clock()
        )
        claim.add_done_callback(functools.partial(self._claimed, placements))
        return len(placements)

    def _claimed(self, placements: list[Placement], future: asyncio.Future[dict[str, Execution]]) -> None:
        rows: dict[str, Execution] | None = None
        if future.cancelled():
            pass
        elif future.exception() is not None:
            log.error("claiming %d executions failed: %s", len(placements), future.exception())
        else:
            rows = future.result()
        now = self.clock()
        freed: dict[str, WorkerEntry] = {}
        for placement in placements:
            execution_id = placement.execution_id
            self._claiming.discard(execution_id)
            entry = self._workers.get(placement.worker)
            current = self._executions.get(execution_id)
            row = rows.get(execution_id) if rows is not None else None
            if row is None:
                # After a failed claim the safety tick retries: no hot loop against a database that is down.
                if entry is not None and entry.release(execution_id) and rows is not None:
                    freed[entry.name] = entry
                if current is not None and current.state is State.CREATED:
                    if rows is None:  # the claim itself failed: nothing changed, back in line
                        self._enqueue(current, placement.shape)
                    else:  # another replica has it, or it was cancelled
                        del self._executions[execution_id]
                continue
            if current is None:
                # Cancelled while the claim was in flight (the cancel committed after it).
                if entry is not None and entry.release(execution_id):
                    freed[entry.name] = entry
                continue
            if entry is None or not entry.dispatchable or execution_id not in entry.holdings:
                # The worker left or moved while the claim was in flight: give the row back.
                self._executions[execution_id] = row
                self._requeue(row, entry, next_attempt=False)
                continue
            self._send(row, entry, placement.shape.requests, now)
        if freed:
            self._dispatch(workers=freed.values())

    def _back_in_line(self, requeued: Execution) -> None:
        # Queue it here only once the row is CREATED again: a claim before that would fail.
        future = self.store.save(requeued)
        future.add_done_callback(functools.partial(self._requeue_saved, requeued))

    def _requeue_saved(self, requeued: Execution, future: asyncio.Future[None]) -> None:
        execution_id = requeued.execution_id
        if future.cancelled():
            return
        exc = future.exception()
        if isinstance(exc, Conflict):
            self._forget(execution_id)
            return
        if exc is not None:
            log.error("requeueing %s failed (%s); retrying", execution_id, exc)
            asyncio.get_running_loop().call_later(1.0, self._retry_requeue, requeued)
            return
        if self._executions.get(execution_id) is requeued:
            shape = self._shape_of(requeued)
            self._enqueue(requeued, shape)
            self._dispatch(shapes=[shape])

    def _retry_requeue(self, requeued: Execution) -> None:
        if self._executions.get(requeued.execution_id) is requeued:
            self._back_in_line(requeued)

    def _forget(self, execution_id: str) -> None:
        execution = self._executions.pop(execution_id, None)
        self._queue.remove(execution_id)
        self._committing.pop(execution_id, None)
        if execution is not None and execution.worker:
            entry = self._workers.get(execution.worker)
            if entry is not None and entry.release(execution_id):
                self._dispatch(workers=[entry])
        self._wake(execution_id)

    def _lose_worker(self, entry: WorkerEntry, why: str) -> list[Shape]:
        for execution_id in list(entry.holdings):
            if execution_id in self._claiming:
                entry.release(execution_id)  # _claimed gives the row back when its claim lands
        return super()._lose_worker(entry, why)

    # ----------------------------------------------------------------- executions

    def _current(self, execution_id: str) -> Execution | None:
        """What this replica knows first-hand: executions on its own workers (the mirror may be stale)."""
        committing = self._committing.get(execution_id)
        if committing is not None:
            return committing
        execution = self._executions.get(execution_id)
        if execution is not None and execution.state is not State.CREATED:
            return execution
        return None

    async def watch(self, execution_id: str) -> AsyncIterator[Execution]:
        current = await self.get(execution_id)
        input_json = current.input_json  # read once: an input never changes
        yield current
        wakeup = self._wakeups.setdefault(execution_id, asyncio.Event())
        updates: asyncio.Queue[Execution] = asyncio.Queue()
        watchers = self._watchers.setdefault(execution_id, set())
        watchers.add(updates)
        try:
            while not current.state.finished:
                getter = asyncio.ensure_future(updates.get())
                woken = asyncio.ensure_future(wakeup.wait())
                done, _ = await asyncio.wait(
                    {getter, woken}, timeout=WATCH_POLL, return_when=asyncio.FIRST_COMPLETED
                )
                wakeup.clear()
                for waiter in (getter, woken):
                    waiter.cancel()
                latest = self._current(execution_id)
                if latest is None or getter not in done:
                    # Not ours, or no news from here: the database has the last word on a final state.
                    stored = await self.store.get_execution(execution_id)
                    if stored is not None and (latest is None or stored.state.finished):
                        latest = stored
                if latest is not None and _changed(current, latest):
                    current = _with_input(latest, input_json)
                    yield current
        finally:
            watchers.discard(updates)
            if not watchers:
                self._watchers.pop(execution_id, None)
                self._wakeups.pop(execution_id, None)

    def _wake(self, execution_id: str) -> None:
        event = self._wakeups.get(execution_id)
        if event is not None:
            event.set()

    async def cancel(self, execution_id: str) -> Execution:
        _check_id(execution_id)
        try:
            cancelled = await self.store.cancel(execution_id, self.clock())
        except Exception as exc:
            raise Unavailable(f"could not cancel {execution_id}: {exc}") from exc
        if cancelled is None:
            current = await self.get(execution_id)
            if current.state is State.CANCELLED:
                return current  # a retried cancel answers the same
            raise FailedPrecondition(f"execution {execution_id} is already {current.state.label}")
        self._cancelled_elsewhere(execution_id, cancelled)
        return cancelled

    def _cancelled_elsewhere(self, execution_id: str, final: Execution | None = None) -> None:
        """A cancel committed (here or on another replica): stop it here if we hold it."""
        execution = self._executions.pop(execution_id, None)
        if execution is None:
            return
        self._queue.remove(execution_id)
        entry = self._workers.get(execution.worker) if execution.worker else None
        if entry is not None:
            if entry.session is not None and execution.state is not State.CREATED:
                entry.session.push(Cancelled(execution_id, execution.generation, "cancelled by a client"))
            if entry.release(execution_id):
                self._dispatch(workers=[entry])
        final = final or execution.evolve(state=State.CANCELLED, updated_at=self.clock())
        self.events.finished(final)
        self._finished[execution_id] = final
        self._notify(final)
        self._wake(execution_id)

    async def why(self, execution_id: str) -> Why:
        _check_id(execution_id)
        execution = self._current(execution_id) or await self.store.get_execution(execution_id)
        if execution is None:
            raise NotFound(f"execution {execution_id!r} does not exist")
        if execution.state is not State.CREATED:
            where = f" on worker {execution.worker}" if execution.worker else ""
            return Why(execution, f"execution is {execution.state.label}{where}")
        await self._know_workflow(execution.workflow.name, execution.workflow.version)
        views = [w.view() for w in self._workers.values() if w.accepting]
        # Workers held by other replicas, as they last published themselves.
        views += [_view_of(name, info) for name, info in await self.store.directory(REPLICA_TIMEOUT)]
        explanation = explain(
            self._shape_of(execution), views, execution_id=execution_id, aging=self._aging, now=self.clock()
        )
        return Why(execution, explanation.summary, explanation, self._queue.position(execution_id))

    async def list_workers(self) -> list[WorkerEntry]:
        local = self.workers()
        names = {w.name for w in local}
        directory = await self.store.directory(REPLICA_TIMEOUT)
        remote = [_entry_of(name, info) for name, info in directory if name not in names]
        return sorted(local + remote, key=lambda w: w.name)

    async def set_paused(self, name: str, paused: bool) -> WorkerEntry:
        """Recorded in the database by name, so whichever replica holds the worker (now or
        after it moves) applies it: the holder hears ``NOTIFY flux_paused`` and rereads it."""
        if not await self.store.set_worker_paused(name, paused):
            raise NotFound(f"worker {name!r} is not known; 'flux workers list' shows the fleet")
        entry = self._workers.get(name)
        if entry is not None:
            self._pause(entry, paused)
            return entry
        for listed in await self.list_workers():
            if listed.name == name:
                listed.paused = paused  # as its replica applies it on the notification
                return listed
        raise NotFound(f"worker {name!r} is not connected to any replica")

    async def _apply_pause(self, name: str) -> None:
        entry = self._workers.get(name)
        if entry is not None:
            self._pause(entry, await self.store.worker_paused(name))

    async def _know_workflow(self, name: str, version: int) -> None:
        if (name, version) not in self._workflows:
            for record in await self.store.load_workflows():
                self._learn_workflow(record)

    async def submit(
        self, workflow_name: str, input_json: str = "", version: int = 0, priority: int | None = None
    ) -> Execution:
        if workflow_name and (workflow_name not in self._latest or version > self._latest[workflow_name]):
            await self._know_workflow(workflow_name, version)  # registered through another replica
        return await super().submit(workflow_name, input_json, version, priority)

    async def _accept(self, execution: Execution) -> None:
        """Store a submission; when one of our own workers can take it now, store it already claimed.

        A new execution is invisible to the other replicas until it commits, so inserting
        it as SCHEDULED (owned here, logged in ``dispatches``) is as safe as a claim and
        saves a round trip, and no other replica races us for it. Only when older work of
        the same shape waits (first come, first served) or none of our workers fits does
        it go in as pending, for whichever replica can place it.
        """
        execution_id = execution.execution_id
        shape = self._shape_of(execution)
        placement = None
        if self._queue.count(shape) == 0:
            self._executions[execution_id] = execution
            self._enqueue(execution, shape)
            # Only this submission: aging's starving executions go through the claiming path.
            placements = self._place([shape], None, starving_first=False)
            if placements:
                placement = placements[0]
            else:
                self._queue.remove(execution_id)
                del self._executions[execution_id]
        if placement is None:
            await super()._accept(execution)
            return
        self._claiming.add(execution_id)
        dispatched = execution.evolve(
            state=State.SCHEDULED, worker=placement.worker, generation=1, gpu_indices=placement.gpu_indices
        )
        try:
            await self.store.insert_dispatched(dispatched)
        except Exception as exc:
            self._claiming.discard(execution_id)
            self._executions.pop(execution_id, None)
            entry = self._workers.get(placement.worker)
            if entry is not None and entry.release(execution_id):
                self._dispatch(workers=[entry])
            raise Unavailable(f"could not store the execution: {exc}") from exc
        self.events.submitted(execution)
        claimed: asyncio.Future[dict[str, Execution]] = asyncio.get_running_loop().create_future()
        claimed.set_result({execution_id: dispatched})
        self._claimed([placement], claimed)

    def _admit(self, execution: Execution) -> None:
        known = self._executions.get(execution.execution_id)
        if known is None and execution.execution_id not in self._claiming:
            super()._admit(execution)
        elif known is not None and known.state is State.CREATED:
            # Our own NOTIFY came back before this coroutine resumed and queued a placeholder.
            self._executions.add(execution, self.settings.inline_input_bytes)

    # ----------------------------------------------------------------- workers

    async def register_worker(self, registration: WorkerRegistration) -> str:
        name, token = registration.name, registration.session_token
        entry = self._workers.get(name)
        if not (entry is not None and token and _same_token(token, entry.session_token)):
            record = await self.store.get_worker(name, REPLICA_TIMEOUT)
            if record is not None and record.replica != self.replica_id:
                if token and _same_token(token, record.session_token):
                    await self._adopt(name, record.session_token)
                elif record.connected and record.replica_alive:
                    raise AlreadyExists(
                        f"worker name {name!r} is held by a live stream on another replica; pick another "
                        "name, or reconnect with its session token"
                    )
                else:
                    # Its stream (or its replica) is gone: the name stays the worker's for its
                    # grace period; after that a new process takes it over.
                    frees_at = record.gone_since + self.settings.grace_period
                    if self.clock() < frees_at:
                        raise AlreadyExists(name_held(name, frees_at))
                    error = ExecutionError("WorkerLost", f"worker {name} was replaced by a new process")
                    await self.store.give_back_worker(name, self.clock(), error)
        token = await super().register_worker(registration)
        await self._apply_pause(name)  # paused through any replica, before it moved here
        return token

    async def forget_worker(self, name: str) -> int:
        """Drop a worker wherever its stream is: the database requeues its work and tells its replica."""
        error = ExecutionError("WorkerLost", f"worker {name} was forgotten by an operator")
        entry = self._workers.get(name)
        if entry is not None:
            # A claim is stored soon, not at once: store what it runs first, so the requeue in
            # the database counts the attempt it started (as the one-server path does).
            running = [
                e for i in entry.holdings if (e := self._executions.get(i)) and e.state is State.RUNNING
            ]
            await asyncio.gather(*(self.store.save(e) for e in running), return_exceptions=True)
        try:
            given_back = await self.store.forget_worker(name, self.clock(), error)
        except Exception as exc:
            raise Unavailable(f"could not forget worker {name!r}: {exc}") from exc
        if given_back is None and name not in self._workers:
            raise NotFound(f"worker {name!r} is not registered")
        # Ours or not, what it held is requeued in the database and comes back through NOTIFY.
        self._moved_away(name)
        return len(given_back or ())

    async def _adopt(self, name: str, session_token: str) -> None:
        """Take over a worker (and what it holds) whose stream was on another replica."""
        held = await self.store.adopt_worker(name, session_token)
        for execution in held:
            await self._know_workflow(execution.workflow.name, execution.workflow.version)
        stale = self._workers.pop(name, None)
        if stale is not None and stale.session is not None:
            stale.session.close()
        now = self.clock()
        entry = self._workers[name] = WorkerEntry(
            name=name,
            session_token=session_token,
            labels=MappingProxyType({}),
            capacity=DEFAULT_CAPACITY,
            resources=WorkerResources(),
            software=WorkerSoftware(),
            last_seen=now,
            disconnected_at=now,
        )
        for execution in held:
            execution_id = execution.execution_id
            self._queue.remove(execution_id)
            entry.hold(execution_id, self._record_of(execution).requests, execution.gpu_indices)
            self._executions[execution_id] = execution
            if execution.state is State.SCHEDULED:
                # The worker may never have seen this dispatch: claim it in time or it goes back.
                deadline = now + self.settings.ack_deadline
                heapq.heappush(self._deadlines, (deadline, execution_id, execution.generation))
        log.info("adopted worker %s with %d executions from another replica", name, len(held))

    def connect(self, name: str, session_token: str, transport: str = "grpc") -> Session:
        session = super().connect(name, session_token, transport)
        entry = self._workers[name]
        self._spawn(self.store.set_worker_connected(name, True, _info_of(entry), _load_of(entry)))
        return session

    def disconnect(self, session: Session) -> None:
        super().disconnect(session)
        entry = self._workers.get(session.worker)
        if entry is not None and entry.session is None:
            self._spawn(self.store.set_worker_connected(session.worker, False, None, None))

    def _unknown_worker(self, name: str) -> Exception:
        # Its stream may be moving here from another replica: the worker retries until it registers.
        return Unavailable(f"worker {name!r} is not connected to this replica; reconnect and register")

    def _moved_away(self, name: str) -> None:
        """Another replica adopted (or replaced) this worker: let go without requeueing its work."""
        entry = self._workers.pop(name, None)
        if entry is None:
            return
        if entry.session is not None:
            entry.session.close()
        for execution_id in entry.holdings:
            if execution_id not in self._claiming:
                self._executions.pop(execution_id, None)
        log.info("worker %s moved to another replica", name)

    # ----------------------------------------------------------------- notifications

    def _on_notify(self, channel: str, payload: str) -> None:
        if channel == "flux_pending":
            self._mirror(parse_pending(payload))
        elif channel == "flux_cancel":
            self._cancelled_elsewhere(payload)
        elif channel == "flux_done":
            for execution_id in payload.splitlines():
                self._wake(execution_id)
        elif channel == "flux_workers":
            replica, epoch, name = payload.split(" ", 2)
            if replica != self.replica_id and int(epoch) > self.store.epochs.get(name, 0):
                self._moved_away(name)
        elif channel == "flux_paused":
            self._spawn(self._apply_pause(payload))
        elif channel == "flux_workflows" and payload != self.replica_id:
            self._spawn(self._reload_workflows())

    async def _reload_workflows(self) -> None:
        for record in await self.store.load_workflows():
            self._learn_workflow(record)

    def _mirror(self, refs: list[PendingRef]) -> None:
        """Queue pending executions announced by the database (ours echo back; they are skipped)."""
        shapes: dict[Shape, None] = {}
        unknown: list[PendingRef] = []
        for ref in refs:
            if ref.execution_id in self._executions or ref.execution_id in self._claiming:
                continue
            record = self._workflows.get((ref.workflow_name, ref.workflow_version))
            if record is None:
                unknown.append(ref)
                continue
            execution = Execution(
                execution_id=ref.execution_id,
                workflow=WorkflowRef(record.name, record.version, record.source_hash, record.entrypoint),
                seq=ref.seq,
                input_json="",  # not needed to place it; the claim returns the whole row
                max_attempts=record.max_attempts,
                # Announcements carry no priority or submission time: the workflow's priority,
                # and aging counts from when this replica learned of it.
                created_at=self.clock(),
                priority=record.priority,
            )
            self._executions[ref.execution_id] = execution
            shape = self._shape_of(execution)
            self._enqueue(execution, shape)
            shapes[shape] = None
        if shapes:
            self._dispatch(shapes=list(shapes))
        if unknown:
            self._spawn(self._mirror_after_reload(unknown))

    async def _mirror_after_reload(self, refs: list[PendingRef]) -> None:
        await self._reload_workflows()
        self._mirror([r for r in refs if (r.workflow_name, r.workflow_version) in self._workflows])

    # ----------------------------------------------------------------- replica housekeeping

    async def _replica_loop(self) -> None:
        last_tick = 0.0
        while True:
            await asyncio.sleep(HEARTBEAT)
            try:
                await self.store.heartbeat(
                    {name: _load_of(e) for name, e in self._workers.items() if e.connected}
                )
                now = self.clock()
                if now - last_tick >= self.settings.safety_tick:
                    last_tick = now
                    await self._resync()
                    swept = await self.store.sweep(REPLICA_TIMEOUT + self.settings.grace_period, now)
                    if swept:
                        log.warning("requeued %d executions of stopped replicas", len(swept))
            except Exception:  # the next heartbeat tries again; a missed one only ages us
                log.exception("replica housekeeping failed")

    async def _resync(self) -> None:
        """Reread the shared queue: covers a missed NOTIFY, and drops rows claimed elsewhere."""
        before = {i for i, e in self._executions.items() if e.state is State.CREATED}
        pending = await self.store.pending_refs()
        listed = {ref.execution_id for ref in pending}
        for execution_id in before - listed:
            current = self._executions.get(execution_id)
            if current is not None and current.state is State.CREATED and execution_id not in self._claiming:
                del self._executions[execution_id]
                self._queue.remove(execution_id)
        self._mirror(pending)


def _changed(old: Execution, new: Execution) -> bool:
    return (old.state, old.worker, old.attempt, old.generation) != (
        new.state,
        new.worker,
        new.attempt,
        new.generation,
    )


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("replica background task failed: %s", task.exception())


# ----------------------------------------------------------------- the worker directory
# What a replica publishes about its workers, so any replica can explain a pending
# execution against the whole fleet.


def _info_of(entry: WorkerEntry) -> dict[str, Any]:
    return {
        "labels": dict(entry.labels),
        "capacity": entry.capacity,
        "transport": entry.transport,
        "packages": dict(entry.software.packages),
        "markers": dict(entry.software.marker_environment),
        "runtimes": list(entry.software.runtimes),
    }


def _load_of(entry: WorkerEntry) -> dict[str, Any]:
    r = entry.resources
    return {
        "resources": [r.cpu_total, r.cpu_available, r.memory_total, r.memory_available, r.disk_total,
                      r.disk_free, [[g.index, g.uuid, g.name, g.memory_total, g.memory_free] for g in r.gpus]],
        "active": len(entry.holdings),
        "reserved": [entry.reserved.cpu, entry.reserved.memory, entry.reserved.disk],
        # Reserved since the worker's last report, which its observed free amounts do not show yet.
        "unreported": [entry.unreported.cpu, entry.unreported.memory, entry.unreported.disk],
        "held_gpus": sorted(entry.held_gpus),
        "draining": entry.draining,
        "paused": entry.paused,
        "seen": entry.last_seen,
    }  # fmt: skip


def _entry_of(name: str, info: dict[str, Any]) -> WorkerEntry:
    view = _view_of(name, info)
    return WorkerEntry(
        name=name,
        session_token="",
        labels=MappingProxyType(dict(view.labels)),
        capacity=view.capacity,
        resources=view.resources,
        software=view.software,
        transport=info.get("transport", "grpc"),
        draining=info.get("draining", False),
        paused=view.paused,
        last_seen=info.get("seen", 0.0),
        reserved=view.reserved,
        unreported=view.unreported,
        elsewhere=Elsewhere(info.get("replica", ""), view.active, view.held_gpus),
    )


def _view_of(name: str, info: dict[str, Any]) -> WorkerView:
    cpu_total, cpu_free, mem_total, mem_free, disk_total, disk_free, gpus = info["resources"]
    return WorkerView(
        name=name,
        resources=WorkerResources(
            cpu_total, cpu_free, mem_total, mem_free, disk_total, disk_free, tuple(Gpu(*g) for g in gpus)
        ),
        labels=MappingProxyType(info.get("labels", {})),
        software=WorkerSoftware(info.get("packages", {}), info.get("markers", {}), info.get("runtimes", ())),
        capacity=info.get("capacity", DEFAULT_CAPACITY),
        active=info["active"],
        reserved=Amounts(*info["reserved"]),
        unreported=Amounts(*info.get("unreported", (0, 0, 0))),
        held_gpus=frozenset(info["held_gpus"]),
        paused=info.get("paused", False),
    )
