"""Replicas share the pending queue: each mirrors the CREATED rows the database announces.

``NOTIFY flux_pending`` (a typed ``notices.PendingAdded``) adds rows to the
mirror; the safety tick rereads the queue for anything missed and drops rows
another replica claimed. Watchers of executions held elsewhere poll the database.
Tenants' terms changed through another replica apply on its ``NOTIFY
flux_tenants``, and each safety tick rereads them and the cluster's usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from itertools import islice
from typing import TYPE_CHECKING, Any

from flux.dispatcher.transitions import dependencies
from flux.domain.execution import Execution, State
from flux.domain.gang import GangRun
from flux.store import PendingRef, notices

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.modes.shared.background import Background
    from flux.dispatcher.modes.shared.binder import SharedBinder
    from flux.dispatcher.modes.shared.fleet import SharedFleet
    from flux.store import SharedStore

log = logging.getLogger("flux.replica")

# How often a watcher of an execution held by another replica rereads it, besides NOTIFY wake-ups.
WATCH_POLL = 1.0
# The most dependencies held by other replicas one safety tick reads back from the database.
RESYNC_DEPENDENCIES = 1000


class SharedFeed:
    """Pending work announced by the database (NOTIFY), reread on each safety tick."""

    changes_pushed = False  # another replica's changes arrive as wake-ups, read from the database

    d: Handle

    def __init__(self, store: SharedStore, tasks: Background, binder: SharedBinder, fleet: SharedFleet):
        self.store = store
        self.tasks = tasks
        self.binder = binder
        self.fleet = fleet
        self._loop: asyncio.Task[None] | None = None
        # A reread of the pending rows in flight, and whether another was asked for meanwhile.
        self._rereading = False
        self._reread_again = False

    def attach(self, d: Handle) -> None:
        self.d = d
        d.flow.shared_token = self._token_due

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
        try:
            done, _ = await asyncio.wait(
                {getter, woken}, timeout=WATCH_POLL, return_when=asyncio.FIRST_COMPLETED
            )
        finally:  # also when the watcher goes away meanwhile: no task is left pending behind it
            for waiter in (getter, woken):
                waiter.cancel()
        wakeup.clear()
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
                self._slot_freed()  # a requeue gives back its slot
            case notices.Cancelled(execution_id):
                self.binder.cancelled_elsewhere(execution_id)
                self._slot_freed()
            case notices.Finished(execution_ids):
                for execution_id in execution_ids:
                    d.watchers.wake(execution_id)
                # Dependencies that ended elsewhere: the replica that ended them released their
                # dependents it knew of; those it did not (mirrored after) are settled from here.
                ended = [e for e in execution_ids if e in d.dependencies.dependents]
                if ended:
                    self.tasks.spawn(dependencies.lookup(d, ended))
                self._slot_freed()
            case notices.WorkerMoved(replica, epoch, name):
                if replica != self.store.replica_id and epoch > self.store.cluster.epochs.get(name, 0):
                    self.fleet.moved_away(name)
            case notices.PauseChanged(name):
                self.tasks.spawn(self.fleet.apply_pause(name))
            case notices.WorkflowsChanged(replica) if replica != self.store.replica_id:
                self.tasks.spawn(self.learn_workflows())
            case notices.TenantsChanged(replica) if replica != self.store.replica_id:
                self.tasks.spawn(self._tenants())
            case notices.LimitsChanged(replica) if replica != self.store.replica_id:
                self.tasks.spawn(d.limits.reload())

    def _slot_freed(self) -> None:
        """A slot may have freed somewhere: what a key's full concurrency refused is read again."""
        if self.binder.flow.waiting:
            self.binder.flow.waiting = False
            self._reread()

    def _token_due(self) -> None:
        """A rate's shared bucket that refused a claim has a token again: read the pending rows."""
        self.binder.flow.waiting = False
        self._reread()

    def _reread(self) -> None:
        """Read every pending row again, one read at a time: a reread asked for while one is in
        flight is one more read once it ends, however many asked. A batch's cancel ends 2,000
        members in one commit, and each of their notices may ask; a read each, of every pending
        row (100,000 of a throttled batch), took every pooled connection, and the cancel itself
        waited past the pool's timeout."""
        if self._rereading:
            self._reread_again = True
            return
        self._rereading = True
        self.tasks.spawn(self._pending_again())

    async def _pending_again(self) -> None:
        try:
            while True:
                self._reread_again = False
                self.mirror(await self.store.pending_refs())
                if not self._reread_again:
                    return
        finally:
            self._rereading = False

    def mirror(self, refs: tuple[PendingRef, ...] | list[PendingRef]) -> None:
        """Queue pending executions announced by the database (ours echo back; they are skipped)."""
        d = self.d
        shapes: dict[Any, None] = {}
        unknown: list[PendingRef] = []
        for ref in refs:
            if ref.execution_id in d.dependencies and not ref.waiting:
                # Released by the replica that ended its last dependency: queue it here too.
                d.dependencies.forget(ref.execution_id)
                d.table.drop(ref.execution_id)
            if ref.execution_id in d.table or ref.execution_id in self.binder.claiming:
                continue
            record = d.catalogue.get(ref.workflow_name, ref.workflow_version)
            if record is None:
                unknown.append(ref)
                continue
            execution = Execution(
                execution_id=ref.execution_id,
                workflow=record.ref,
                seq=ref.seq,
                input_json="",  # not needed to place it; the claim returns the whole row
                max_attempts=record.max_attempts,
                # Announcements carry no priority: the workflow's. Aging and the pending timeout
                # count from the submission (from when this replica learned of it, when the
                # announcing replica did not say).
                created_at=ref.created_at or d.clock(),
                priority=record.priority,
                tenant=ref.tenant,  # its quota and fair share count from here
                not_before=ref.not_before,  # a retry's wait: queue_up holds it back until then
                # Failing it while it waits is conditional on this generation (waiting.py).
                generation=ref.generation,
                attempt=ref.attempt,
                # A run's overrides are its attempt timeout and retries, never its pending timeout.
                policy=record.policy,
                gang=GangRun(ref.gang_size) if ref.gang_size else None,
                # Held in the dependency index while it waits (transitions/dependencies.py).
                after=ref.after,
                when=ref.when,
                waiting=ref.waiting,
            )
            d.table.set(execution)
            shape = d.catalogue.shape_of(execution)
            d.queue_up(execution, shape)
            shapes[shape] = None
            if not ref.started:  # whichever replica holds it when its pending timeout passes ends it
                d.timing.submitted(execution)
        if shapes:
            d.passes.work_added(shapes)
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
                d.dependencies.forget(execution_id)
        self.mirror(pending)
        # Dependencies held elsewhere that may have ended unheard (a NOTIFY missed): read them.
        elsewhere = list(
            islice((e for e in d.dependencies.dependents if e not in d.table), RESYNC_DEPENDENCIES)
        )
        if elsewhere:
            await dependencies.lookup(d, elsewhere)
        await self._tenants()

    async def _tenants(self) -> None:
        """Tenants' terms changed through another replica, and what the others' workers hold now."""
        d = self.d
        tenants = await d.tenants.list()
        if tenants != d.usage.tenants:
            d.apply_tenants(tenants)
        if self.store.quota_guard is not None:
            d.usage.observe(await self.store.held())
            if d.usage.freed:
                d.passes.everything()
            await self.store.prune_preemptions(self.binder.stale_preemptions(d.clock()))

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.d.settings.safety_tick)
            try:
                await self.resync()
            except self.d.store.unavailable as exc:  # the database away: the next tick tries again
                log.warning(
                    "rereading the shared queue failed, the database is unavailable (%s); retrying in %gs",
                    exc,
                    self.d.settings.safety_tick,
                )
            except Exception:  # the next tick tries again
                log.exception("rereading the shared queue failed")
