"""Preemption: stopping what a cohort borrowed so a tenant gets its nominal quota back.

Who is preempted is decided by the pure planner (``flux.matching.preemption.plan``);
this module carries it out, in three steps:

1. ``reclaim`` (each housekeeping step, and for its shape when a submission is not
   placed at once): for the pending executions of each lane (a tenant's shape), in
   order and as many as keep the tenant within its nominal quota, that the fleet
   cannot place, ask the planner for the smallest set of borrowed executions whose
   stop makes room, each planned as if the plans before it had happened. Each
   victim's worker is told to stop it (``Stop`` with ``preempted``), and from
   then on the victim is *stopping*: it keeps its room, so nothing else is placed in
   it, and its generation is fenced (a claim or a late result is refused).
2. ``stopped``: the worker hands it back (Release), its result arrives after all (and
   is refused), its worker is lost, or ``--preemption-grace`` runs out, whichever is
   first. The victim goes back in line with its attempt not counted as a failure
   (requeued, reason "preempted") and its room is freed.
3. A pass over the lane it was reclaimed for places its work in the freed room first;
   then the usual pass over everything (fair share in ``flux.matching.fairshare``).

A preemptor whose victims are still stopping is not planned for again, so one
pending execution never preempts twice for the same room. A preemptor that leaves
the line without running (cancelled, timed out) withdraws the stops it caused:
victims its worker has not handed back yet are no longer stopping (a claim or a
result of theirs is accepted again, and they are not requeued). And each tenant's
preemptions spend a budget (``--preemption-budget``, victims a minute,
``flux.matching.preemption.Budget``): a plan the budget cannot pay for is held back
and counted (``flux_preemptions_refused_total{reason="budget"}``), so a tenant that
submits and cancels in a loop cannot stop another tenant's work without end. On PostgreSQL replicas
every replica plans over the queue they all mirror, with the victims its own
workers run and the cluster's usage as its last claim read it; one replica at a
time acts for a pending execution (the binder's ``preempt``: a row in the
``preemptions`` table), so two replicas never both preempt for it.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from flux.dispatcher.state.lifecycle import Preempt, Refusal, Requeue
from flux.dispatcher.state.session import Stop
from flux.dispatcher.transitions import attempts, gangs, housekeeping
from flux.dispatcher.transitions.victims import Stopping, anyone_borrowing, candidates, stop_reason
from flux.domain.execution import Execution, State
from flux.matching.preemption import Budget, Preemption, Running, plan, reclaimable

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.matching import Shape, WorkerView
    from flux.matching.tenancy import Accounts

log = logging.getLogger("flux.dispatcher")

# Seconds a shape's submissions do not plan after a plan for it found nothing to preempt: planning
# reads the fleet and every held execution, and a burst from a tenant whose work nothing can make
# room for would do it each time.
SUBMISSION_RETRY = 0.5
# Replicas: seconds a replica leaves a preemptor to the replica that acts for it before planning again.
ELSEWHERE_FOR = 5.0
# Pending executions of one lane planned for in one step, at most: the rest wait for the next.
PLANS_PER_LANE = 64


class Reclaimer:
    def __init__(self, d: Handle):
        self.d = d
        self.stopping: dict[str, Stopping] = {}
        # Preemptor -> its victims still stopping.
        self.waiting: dict[str, set[str]] = {}
        # When a plan for each shape last found nothing to preempt (see SUBMISSION_RETRY).
        self._hopeless: dict[Shape, float] = {}
        # Replicas: preemptors another replica acts for, and until when we leave them to it.
        self._elsewhere: dict[str, float] = {}
        # Victims each tenant's preemptions may stop a minute (--preemption-budget).
        self.budget = Budget(d.settings.preemption_budget)
        # Tenants whose budget held a plan back, and until when none of theirs is planned: a plan
        # per step while it refills would cost the fleet walk and count one refusal per step.
        self._held: dict[str, float] = {}
        # Preemptor -> (tenant, victims) its plan spent, until the binder decides who acts for it:
        # a replica that leaves it to another gives the budget back (the other one spends its own).
        self._spent: dict[str, tuple[str, int]] = {}
        # Preemptor -> its victims handed back whose rows are not committed back in line yet.
        self._landing: dict[str, int] = {}

    # ----------------------------------------------------------------- deciding

    def reclaim(self, shapes: list[Shape] | None = None) -> int:
        """Preempt for every tenant whose quota is taken by its cohort (for the lanes of ``shapes``,
        or every lane); returns how many executions were preempted."""
        d = self.d
        accounts = d.usage.accounts
        if not d.settings.preemption or accounts is None or not d.queue:
            return 0
        if shapes is not None:
            if not any(reclaimable(accounts, shape) for shape in shapes):
                return 0  # the usual case of a submission that waits: its tenant is at its quota
            # After a plan for a shape found nothing to preempt, its submissions do not plan again
            # for SUBMISSION_RETRY (each plan reads the fleet and every held execution); the step does.
            now = d.clock()
            shapes = [s for s in shapes if now - self._hopeless.get(s, -SUBMISSION_RETRY) >= SUBMISSION_RETRY]
            if not shapes:
                return 0
        if not anyone_borrowing(accounts):
            return 0
        lanes = (
            shapes
            if shapes is not None
            else [s for t, _ in list(d.queue.tenants()) for s in d.queue.lanes(t)]
        )
        lanes = [shape for shape in lanes if reclaimable(accounts, shape)]
        if not lanes:
            return 0
        now = d.clock()
        workers: list[WorkerView] | None = None
        running: list[Running] = []
        # What the plans of this step leave: their preemptors charged, their victims refunded, so
        # the next pending execution of a lane is planned as if they had happened (and a tenant
        # reclaims up to its nominal quota in one step, not one execution per grace).
        after = self._after(accounts)
        count = 0
        for shape in lanes:
            planned = 0
            for item in d.queue.iter_shape(shape):
                if planned >= PLANS_PER_LANE or not reclaimable(after, shape):
                    break
                if self._held.get(shape.tenant, 0.0) > now and item.execution_id not in self.waiting:
                    break  # its tenant's budget is spent: nothing of the tenant's is planned until it refills
                if item.execution_id in self.waiting or self._elsewhere.get(item.execution_id, 0.0) > now:
                    # Planned before, its victims still stopping (or another replica acts for it):
                    # counted as if placed and its victims gone, so what follows is planned beside it
                    # (its demand is in the accounts already while its preemption is under way).
                    if item.execution_id not in d.usage.reserved:
                        after.charge(shape.tenant, shape.demand)
                    continue
                if workers is None:
                    workers = [entry.view() for entry in d.registry.values() if entry.dispatchable]
                    running = candidates(d, self.stopping)
                preemption = plan(after, item.execution_id, shape, workers, running)
                if preemption is None:
                    self._hopeless[shape] = now
                    break  # the rest of the lane is the same shape: nothing makes room for it either
                victims = len(preemption.victims)
                if not self.budget.allows(shape.tenant, victims, now):
                    self._refused(shape.tenant, victims, now)
                    break
                self.budget.spend(shape.tenant, victims, now)
                self._spent[item.execution_id] = (shape.tenant, victims)
                planned += 1
                # Planned: not planned again while the binder decides, nor while its victims stop.
                self.waiting[item.execution_id] = set()
                gone = {victim.execution_id for victim in preemption.victims}
                running = [r for r in running if r.execution_id not in gone]
                after.charge(shape.tenant, shape.demand)
                for victim in preemption.victims:
                    after.refund(victim.tenant, victim.shape.demand)
                d.binder.preempt(item.execution_id, functools.partial(self._act, preemption, shape))
                count += len(gone)
        return count

    def _refused(self, tenant: str, victims: int, now: float) -> None:
        """A plan of ``tenant``'s that its budget cannot pay for now: counted, and its tenant held back
        until the budget has refilled enough."""
        self._held[tenant] = now + self.budget.next_in(tenant, victims, now)
        counters = self.d.events.counters
        counters.preemptions_refused[Refusal.BUDGET] += 1
        key = (tenant, Refusal.BUDGET)
        counters.preemptions_refused_by_tenant[key] = counters.preemptions_refused_by_tenant.get(key, 0) + 1
        log.info(
            "tenant %s's preemption budget of %d a minute is spent; reclaim is held back for %.0f s",
            tenant, self.budget.per_minute, self._held[tenant] - now,
        )  # fmt: skip

    def _act(self, preemption: Preemption, lane: Shape) -> None:
        """Stop the victims of ``preemption``, if the plan still holds now (on replicas it is a
        database round trip older); else let its preemptor be planned again."""
        d, preemptor = self.d, preemption.execution_id
        self._spent.pop(preemptor, None)
        if preemptor not in self.waiting:
            return
        held = [d.table.get(v.execution_id) for v in preemption.victims]
        if preemptor not in d.queue or not all(
            e is not None
            and (e.worker == v.worker or gangs.is_member(e, v.worker))  # a gang victim: any member's
            and e.state in (State.SCHEDULED, State.RUNNING)
            and v.execution_id not in self.stopping
            for e, v in zip(held, preemption.victims, strict=True)
        ):  # fmt: skip
            self._end(preemptor)
            # Nothing was stopped: the budget it spent when planned is its tenant's again.
            self.budget.refund(lane.tenant, len(preemption.victims), d.clock())
            return
        log.info(
            "execution %s of tenant %s %s on worker %s",
            preemptor, lane.tenant, preemption.describe(), ", ".join(preemption.members or (preemption.worker,)),
        )  # fmt: skip
        # Its demand counts as its tenant's from now: the cohort has nothing to lend out of the room
        # its first victims free while the others still stop.
        d.usage.reserve(preemptor, lane.tenant, lane.demand)
        for victim in preemption.victims:
            self._preempt(victim.execution_id, preemptor, lane)

    def lost(self, preemptor: str) -> None:
        """Another replica acts for ``preemptor`` (or we could not ask): leave it for a while."""
        if self.waiting.get(preemptor) == set():
            del self.waiting[preemptor]
        spent = self._spent.pop(preemptor, None)
        if spent is not None:  # nothing stopped here: what its plan spent is its tenant's again
            self.budget.refund(*spent, self.d.clock())
        self._elsewhere[preemptor] = self.d.clock() + ELSEWHERE_FOR
        if len(self._elsewhere) > 10_000:  # old entries of preemptors long placed
            now = self.d.clock()
            self._elsewhere = {k: v for k, v in self._elsewhere.items() if v > now}

    def _after(self, accounts: Accounts) -> Accounts:
        """The accounts as they will be once the preemptions under way are done: their victims
        refunded (their preemptors are charged already, as reservations)."""
        d = self.d
        after = accounts.copy()
        for victim_id in self.stopping:
            victim = d.table.get(victim_id)
            if victim is not None and self.is_stopping(victim):
                after.refund(victim.tenant, d.catalogue.shape_of(victim).demand)
        return after

    def _end(self, preemptor: str) -> None:
        self.waiting.pop(preemptor, None)
        self.d.usage.unreserve(preemptor)

    def _preempt(self, execution_id: str, preemptor: str, lane: Shape) -> None:
        d = self.d
        execution = d.table.get(execution_id)
        assert execution is not None  # _act read it from the table in this same step
        reason = stop_reason(lane)
        for entry in gangs.holders(d, execution):  # a gang: every member stops, and hands it back
            if entry.session is not None:
                entry.session.push(Stop(execution_id, execution.generation, reason, preempted=True))
        d.events.counters.preempted[Preempt.RECLAIM] += 1
        self.stopping[execution_id] = Stopping(
            execution.generation, execution.worker, d.clock() + d.settings.preemption_grace, preemptor, lane
        )
        self.waiting.setdefault(preemptor, set()).add(execution_id)

    def preview(self, execution_id: str, shape: Shape, viewer: str = "") -> str:
        """For explain: ``will preempt 2 executions of tenant web``, what it waits for, or that the
        tenant's budget holds it back; "" if none. With ``viewer`` (a tenant's token) no other
        tenant is named (``Preemption.describe``)."""
        d = self.d
        victims = self.waiting.get(execution_id)
        if victims:
            return f"waiting for {len(victims)} preempted execution{'s' if len(victims) != 1 else ''} to stop"
        accounts = d.usage.accounts
        if not d.settings.preemption or accounts is None or not reclaimable(accounts, shape):
            return ""
        workers = [entry.view() for entry in d.registry.values() if entry.dispatchable]
        preemption = plan(self._after(accounts), execution_id, shape, workers, candidates(d, self.stopping))
        if preemption is None:
            return ""
        held = self.budget.held_back(shape.tenant, len(preemption.victims), d.clock())
        return held or preemption.describe(viewer)

    def withdraw(self, preemptor: str) -> None:
        """``preemptor`` left the line without running (cancelled, timed out): the stops it caused
        are withdrawn. Its victims not handed back yet are no longer stopping: each keeps its room
        and is not requeued, its claim and result are accepted again, and a Stop its worker has
        not heard (it was away: the Stop is repeated on reconnect only while stopping) is never
        sent, so it runs on. A worker that heard the Stop has ended the body already: it hands the
        execution back, and it is requeued as released (its attempt not counted).

        The budget is not given back: the Stop was sent, and a worker may have acted on it (a
        tenant that cancels in a loop pays for every stop it caused).
        """
        victims = self.waiting.get(preemptor)
        if victims is None:
            return
        for victim_id in list(victims):
            if self.stopping.pop(victim_id, None) is not None:
                log.info("execution %s keeps running: its preemptor %s left the line", victim_id, preemptor)
        self._end(preemptor)

    # ----------------------------------------------------------------- stopping

    def is_stopping(self, execution: Execution) -> bool:
        """Whether ``execution`` (as the table holds it) was preempted and is not handed back yet."""
        stop = self.stopping.get(execution.execution_id)
        return (
            stop is not None
            and stop.generation == execution.generation
            and stop.worker == execution.worker
            and execution.state in (State.SCHEDULED, State.RUNNING)
        )

    def stopped(self, execution: Execution) -> Execution:
        """``execution`` (stopping) is handed back, or will never be: requeue it, free its room."""
        d = self.d
        stop = self.stopping.get(execution.execution_id)
        # Its preemptor's reservation stays until the row is committed back in line (``_landed``).
        self._forget(execution.execution_id, end=False)
        if stop is not None:
            self._landing[stop.preemptor] = self._landing.get(stop.preemptor, 0) + 1
        entry = d.registry.get(execution.worker)
        # Not counted against max_attempts; its run time counts against the next try's timeout.
        landed = (lambda: self._landed(stop)) if stop is not None else None
        requeued = housekeeping.requeue(d, attempts.preempted_run(d, execution), entry, False, landed)
        d.events.requeued(execution, requeued, Requeue.PREEMPTED)
        if stop is not None and d.queue.first(stop.lane) is not None:
            self._give_room(stop.lane)
        return requeued

    def _give_room(self, lane: Shape) -> None:
        """A pass over the lane the room was reclaimed for (its preemptor, or the next of that lane if
        the preemptor took another victim's room), before the pass that follows, where the victim's
        tenant could take it back on a fair-share tie. The lane's reservations are lifted for it (its
        work must not be held back by its own reservations), and put back for what still waits."""
        d = self.d
        lifted = [
            (execution_id, held)
            for execution_id, held in d.usage.reserved.items()
            if (pending := d.queue.get(execution_id)) is not None and pending.shape == lane
        ]
        for execution_id, _ in lifted:
            d.usage.unreserve(execution_id)
        d.place(shapes=[lane], only=True)
        for execution_id, (tenant, amount) in lifted:
            if execution_id in self.waiting and execution_id in d.queue:
                d.usage.reserve(execution_id, tenant, amount)

    def expire(self, now: float) -> bool:
        """Free the room of victims whose worker did not hand them back within the grace."""
        changed = False
        for execution_id, stop in list(self.stopping.items()):
            execution = self.d.table.get(execution_id)
            if execution is None or not self.is_stopping(execution):
                # Finished, cancelled or requeued some other way: its preemptor may plan again (and
                # its reservation is lifted once its last victim is gone: a pass is due).
                self._forget(execution_id)
                changed = True
                continue
            if stop.deadline > now:
                continue
            log.warning(
                "execution %s not handed back by %s within the preemption grace; its room is freed",
                execution_id, stop.worker,
            )  # fmt: skip
            entry = self.d.registry.get(stop.worker)
            if entry is not None and entry.session is not None:
                # It may never have heard the first Stop (lost with a stream): its room goes to
                # others now, so its body must not keep running beside theirs. Ahead of their
                # dispatches on the same stream; not preempted, as there is nothing left to hand back.
                entry.session.push(Stop(execution_id, stop.generation, "preemption grace expired"))
            self.stopped(execution)
            changed = True
        return changed

    def connected(self, entry: WorkerEntry) -> None:
        """Repeat the Stop of each victim ``entry`` still runs on its new stream: the first may
        have been lost with the old one (or never sent, the worker away when it was preempted)."""
        assert entry.session is not None
        for execution_id in entry.holdings:
            stop = self.stopping.get(execution_id)
            execution = self.d.table.get(execution_id)
            if stop is not None and execution is not None and self.is_stopping(execution):
                entry.session.push(
                    Stop(execution_id, stop.generation, stop_reason(stop.lane), preempted=True)
                )

    def _forget(self, execution_id: str, end: bool = True) -> None:
        stop = self.stopping.pop(execution_id, None)
        if stop is None:
            return
        victims = self.waiting.get(stop.preemptor)
        if victims is not None:
            victims.discard(execution_id)
            if not victims and end:
                self._end(stop.preemptor)

    def refused(self, execution_id: str, lane: Shape) -> None:
        """A claim was refused by a quota (replicas): a preemptor's may land before its victims' rows
        and count one as still held. Reserved again, so they are not placed back in its room."""
        if execution_id in self.waiting:
            self.d.usage.reserve(execution_id, lane.tenant, lane.demand)

    def _landed(self, stop: Stopping) -> None:
        """A victim's row is committed back in line: after its preemptor's last, the preemptor's
        reservation is lifted and its lane gets the room (again, if a claim refused the first try)."""
        left = self._landing.get(stop.preemptor, 1) - 1
        if left > 0:
            self._landing[stop.preemptor] = left
            return
        self._landing.pop(stop.preemptor, None)
        if self.waiting.get(stop.preemptor) != set():
            return
        self._end(stop.preemptor)
        if self.d.queue.first(stop.lane) is not None:
            self._give_room(stop.lane)
