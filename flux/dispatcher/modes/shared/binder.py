"""Replicas bind by claiming: reserve here, claim the row in PostgreSQL, push only what was won.

``bind`` answers, once the claim lands, one ``Bound`` per placement: won, lost (another
replica claimed it first, or it was cancelled, or a key's concurrency is full or its rate's
shared bucket dry cluster-wide: flow_guard.py), refused by a tenant's quota, or failed with the
claim. The cycle applies them (cycle/placing.py: push, or unreserve and drop or requeue).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from flux.dispatcher.cycle.placing import scheduled_row
from flux.dispatcher.handle import Bound, Outcome
from flux.dispatcher.modes.shared import waiting
from flux.dispatcher.modes.shared.flow_guard import ClusterFlow
from flux.dispatcher.state.deadlines import SHARED_BUCKET, Kind
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.dispatcher.transitions import cancel, submission
from flux.dispatcher.transitions.gangs import member_workers
from flux.domain.execution import Execution, ExecutionError, State
from flux.errors import FailedPrecondition, Unavailable

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.modes.shared.background import Background
    from flux.matching import Placement
    from flux.store import SharedStore

log = logging.getLogger("flux.replica")


class SharedBinder:
    """Reserve here, claim in the database, then push; unreserve on a miss."""

    d: Handle

    def __init__(self, store: SharedStore, tasks: Background):
        self.store = store
        self.tasks = tasks
        # Placed and reserved here, claim in flight: neither pending nor dispatched yet. Counted:
        # a placement refused is placed and claimed again before its first claim is let go.
        self.claiming: Counter[str] = Counter()
        # Concurrency limits made exact at the claim, over every replica's workers.
        self.flow = ClusterFlow()
        # Rate budgets with a timer armed for their shared bucket's next token, and when it fires.
        self.armed: dict[str, float] = {}

    def attach(self, d: Handle) -> None:
        self.d = d
        self.flow.attach(d)
        self.store.flow_guard = self.flow
        d.flow.cluster = self.flow_in_use

    async def flow_in_use(self) -> dict[str, int]:
        """Every concurrency budget's use over the whole cluster (``flux limit show``)."""
        return dict(self.flow.in_use(await self.store.flow_held()))

    def bind(self, placements: list[Placement], with_rows: bool = False) -> asyncio.Future[list[Bound]]:
        """Claim ``placements``: after the rows saved before, or ``with_rows``, in their transaction."""
        d, now = self.d, self.d.clock()
        ids = [p.execution_id for p in placements]
        self.claiming.update(ids)
        wanted = [scheduled_row(d.table.unfinished[p.execution_id], p, now) for p in placements]
        loop = asyncio.get_running_loop()
        bound: asyncio.Future[list[Bound]] = loop.create_future()

        def answered(claim: asyncio.Future[dict[str, Execution]]) -> None:
            bound.set_result(self.claimed(placements, claim))
            # Claiming until the cycle has applied the answer: its callback on ``bound``, queued
            # just now, runs first (callbacks run in order). In between, a won row is CREATED
            # in the table and no longer pending in the database: the resync would drop it as
            # claimed elsewhere, and the row would stay SCHEDULED here with nobody to push it.
            loop.call_soon(self._settled, ids)

        self.store.claim(wanted, with_rows).add_done_callback(answered)
        return bound

    def place_released(self, execution: Execution) -> bool:
        """Place a dependent its dependency's end releases, and claim it in the commit of that end.

        Its row (``waiting`` 0) and the dependency's final state are queued for one batch of
        rows; the claim rides in that batch's transaction (flux/store/postgres/writer.py), so one
        commit both ends the dependency and binds the dependent, and the push follows it: not a
        commit, then a pass, then a claim's commit. Another replica cannot take it meanwhile: a
        claim never takes a row with ``waiting`` > 0, and once committed it is SCHEDULED here. A
        crash between the commit and the push leaves a claimed row, as any claim does (the ack
        deadline, or the sweep of a dead replica, gives it back). Only where ``_submit`` places
        at once: no older work of its shape waits, no quota nor flow limit governs it (the claim's
        guards would refuse it in the rows' transaction), and one of our workers fits it now.
        """
        d, execution_id = self.d, execution.execution_id
        shape = d.catalogue.shape_of(execution)
        if (
            d.queue.count(shape)
            or self.store.quota_guard is not None
            or not d.catalogue.record_of(execution).flow.empty
            or execution.flow_keys
            or execution.not_before > d.clock()
            or execution_id in self.claiming
        ):
            return False
        d.queue_up(execution, shape)
        placements = d.reserve([shape], None, starving_first=False)
        if not placements:
            d.queue.remove(execution_id)
            return False
        self.bind(placements, with_rows=True).add_done_callback(lambda bound: d.apply(bound.result()))
        return True

    def claimed(
        self, placements: list[Placement], claim: asyncio.Future[dict[str, Execution]]
    ) -> list[Bound]:
        """The claim's answer, placement by placement: won (BOUND with the row as stored), lost,
        refused by a quota, or failed with the claim."""
        rows: dict[str, Execution] | None = None
        if claim.cancelled():
            pass
        elif (error := claim.exception()) is not None:
            # The database away (a restart) is the operator's to see once per claim, not a fault of
            # ours: the executions stay pending and are claimed again once it is back.
            away = isinstance(error, self.d.store.unavailable)
            log.log(
                logging.WARNING if away else logging.ERROR,
                "claiming %d executions failed: %s",
                len(placements),
                error,
            )
        else:
            rows = claim.result()
        refused = self.d.usage.refused
        results = []
        for placement in placements:
            execution_id = placement.execution_id
            row = rows.get(execution_id) if rows is not None else None
            if row is not None:
                results.append(Bound(placement, Outcome.BOUND, row))
                continue
            # A quota's refusal is the claim's, whatever became of it: never left for a later claim.
            was_refused = execution_id in refused
            refused.discard(execution_id)
            if execution_id in self.flow.refused:
                # Its key is full on other replicas' workers: forgotten until a slot frees anywhere
                # (flow_guard.py); back in line here it would be placed and refused again at once.
                self.flow.refused.discard(execution_id)
                self.d.flow.refund(execution_id)
                results.append(Bound(placement, Outcome.LOST if rows is not None else Outcome.FAILED))
            elif rows is None:
                results.append(Bound(placement, Outcome.FAILED))
            else:
                results.append(Bound(placement, Outcome.REFUSED if was_refused else Outcome.LOST))
        self._arm_shared_buckets()
        return results

    def _arm_shared_buckets(self) -> None:
        """A timer for each rate whose shared bucket refused a row: its next token's time."""
        d, now = self.d, self.d.clock()
        for budget, wait in self.flow.due.items():
            if self.armed.get(budget, 0.0) <= now:  # none in the heap yet for this budget
                self.armed[budget] = now + wait
                d.timers.arm(Kind.FLOW, budget, SHARED_BUCKET, now + wait)
        self.flow.due.clear()
        if len(self.armed) > 1024:
            self.armed = {b: due for b, due in self.armed.items() if due > now}

    def queue_unwritten(self, execution: Execution) -> bool:
        return False  # the other replicas learn of work from its row: written first, always

    async def submit(self, execution: Execution) -> None:
        """``_submit``, finished here even if the caller goes away meanwhile (its RPC cut): a row
        stored but neither queued nor claimed would wait for a restart."""
        await asyncio.shield(self._submit(execution))

    async def _submit(self, execution: Execution) -> None:
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
        # Not while quotas govern, nor for limited work: the claim is where they are checked cluster-wide.
        limited = not d.catalogue.record_of(execution).flow.empty
        # Nor for one waiting on dependencies: it is held, never placed, until they end.
        if (
            d.queue.count(shape) == 0
            and self.store.quota_guard is None
            and not limited
            and not execution.waiting
        ):
            d.table.set(execution)
            d.queue_up(execution, shape)
            # Only this submission: aging's starving executions go through the claiming path.
            placements = d.reserve([shape], None, starving_first=False)
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
                submission.enqueue(d, execution)
            elif known is not None and known.state is State.CREATED:
                # Our own NOTIFY came back before this coroutine resumed and queued a placeholder.
                d.table.add(execution)
            return
        self.claiming[execution_id] += 1
        dispatched = scheduled_row(execution, placement, execution.updated_at)
        try:
            await self.store.insert_dispatched(dispatched)
        except Exception as exc:
            self._settled([execution_id])
            d.table.drop(execution_id)
            for worker, _ in member_workers(placement):  # a gang: every member's worker
                entry = d.registry.get(worker)
                if entry is not None and entry.release(execution_id):
                    d.passes.room_freed([entry])
            raise Unavailable(f"could not store the execution: {exc}") from exc
        d.events.submitted(execution)
        d.table.add(execution)  # counted against the pending limits like any other
        self._settled([execution_id])
        d.apply([Bound(placement, Outcome.BOUND, dispatched)])

    def _settled(self, execution_ids: list[str]) -> None:
        """A claim of these has been answered and applied."""
        claiming = self.claiming
        for execution_id in execution_ids:
            if claiming[execution_id] > 1:
                claiming[execution_id] -= 1
            else:
                del claiming[execution_id]

    async def submit_many(self, executions: list[Execution]) -> None:
        """Store a batch as pending rows in one transaction; whichever replica fits them claims them.

        No fast path as for one submission: one claim for the whole pass is as cheap, and
        the rows are announced to the other replicas at once.
        """
        await submission.store_and_queue(self.d, executions, self.claiming)

    async def recovered(self, pending: list[Execution]) -> None:
        pass  # a claim's generation is in the database before its dispatch is pushed

    def quotas(self, governed: bool) -> None:
        """While tenants have terms, each claim admits only what their quotas allow cluster-wide."""
        d = self.d
        self.store.quota_guard = (
            d.usage.guard(lambda e: d.catalogue.record_of(e).requests) if governed else None
        )

    def preempt(self, preemptor: str, act: Callable[[], None]) -> None:
        """Every replica plans over the queue they all mirror; the one that takes ``preemptor``'s row
        in ``preemptions`` acts (a row older than the preemption grace is a gone replica's)."""
        d = self.d

        async def take() -> None:
            now = d.clock()
            try:
                taken = await self.store.take_preemption(preemptor, now, self.stale_preemptions(now))
            except Exception:
                d.reclaimer.lost(preemptor)  # planned again at a later step
                raise
            if taken:
                act()
            else:
                d.reclaimer.lost(preemptor)

        self.tasks.spawn(take())

    def stale_preemptions(self, now: float) -> float:
        """Rows of ``preemptions`` taken before this belong to no live replica's preemption."""
        return now - self.d.settings.preemption_grace - self.d.settings.grace_period

    def worker_lost(self, entry: WorkerEntry) -> None:
        for execution_id in list(entry.holdings):
            if execution_id in self.claiming:
                entry.release(execution_id)  # the cycle gives the row back when its claim lands

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
        # Announced once, by the replica that committed it, as the row has it. The replica that
        # held it (perhaps this one, perhaps one whose claim of the row lost to this cancel) only
        # stops it: each announcing would log and count one cancel twice.
        self.d.events.finished(cancelled)
        return cancelled

    async def cancel_many(self, execution_ids: list[str]) -> None:
        """Each a guarded update, as ``cancel`` makes it, all in one transaction; stopped here where
        held, and announced as one line (``cancelled_many``), as on one server."""
        try:
            finals = await self.store.cancel_many(execution_ids, self.d.clock())
        except Exception as exc:
            raise Unavailable(f"could not cancel {len(execution_ids)} executions: {exc}") from exc
        for final in finals:
            if final.execution_id in self.d.table:
                self.cancelled_elsewhere(final.execution_id, final)  # published as it stops
            else:
                self.d.events.finished_elsewhere(final)
        self.d.events.cancelled_many(finals)

    def fail_waiting(self, execution: Execution, error: ExecutionError) -> None:
        waiting.fail_waiting(self.d, self.store, self.tasks, self.claiming, execution, error)

    def cancelled_elsewhere(self, execution_id: str, final: Execution | None = None) -> None:
        """A cancel committed (here or on another replica): stop it here if we hold it."""
        d = self.d
        execution = d.table.get(execution_id)
        if execution is None:
            return
        final = final or execution.evolve(state=State.CANCELLED, updated_at=d.clock())
        cancel.stop_here(d, execution, final, announce=False)
        d.table.committed(final)  # the database has it already
        d.watchers.wake(execution_id)
