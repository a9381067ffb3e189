"""One scheduling pass: the fleet's views → the pure ``schedule`` → reserve on the workers → the
mode's bind → apply what the bind says (push, or unreserve and drop or requeue). ``passes.py``
decides when a pass runs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from flux.dispatcher.cycle import prefetching
from flux.dispatcher.handle import Bound, Outcome
from flux.dispatcher.state.deadlines import Kind
from flux.dispatcher.state.session import Scheduled
from flux.dispatcher.transitions import gangs, housekeeping
from flux.domain.execution import State
from flux.matching import schedule
from flux.matching.tenancy import Vector, capacity_of

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.domain.execution import Execution
    from flux.matching import Placement, Shape


def place(
    d: Handle,
    shapes: list[Shape] | None = None,
    workers: Iterable[WorkerEntry] | None = None,
    starving_first: bool = True,
    only: bool = False,
) -> int:
    """One scheduling pass (scoped to ``shapes`` or ``workers`` when given): reserve, then bind.

    ``only``: the pass stays scoped even when a tenant gave back usage (which otherwise makes it
    a pass over everything): preemption gives what it reclaimed to whom it reclaimed it for first.
    """
    if workers is not None:
        workers = list(workers)  # read twice: by the ordinary pass, then by queueing ahead
    placements = reserve(d, shapes, workers, starving_first, only)
    placements += prefetching.reserve_queued(d, shapes, workers)
    if placements:
        binding = d.binder.bind(placements)
        if isinstance(binding, asyncio.Future):
            binding.add_done_callback(lambda bound: apply(d, bound.result()))
        else:
            apply(d, binding)
    return len(placements)


def reserve(
    d: Handle,
    shapes: list[Shape] | None,
    workers: Iterable[WorkerEntry] | None,
    starving_first: bool = True,
    only: bool = False,
) -> list[Placement]:
    """Decide placements (the pure matcher decides) and reserve them on their workers.

    ``starving_first`` lets executions past ``--starvation-after`` go first wherever they
    fit; a replica's submit fast path turns it off, as it binds only its own submission.
    """
    if not d.queue:
        return []
    # The whole fleet is read through its index (kept per changed worker), so a pass touches
    # only the candidates of its shapes; a pass scoped to a few workers builds their views.
    accounts = d.usage.accounts
    if accounts is not None:
        # The fleet's totals are the fair share's denominators: O(workers), only with tenants' terms.
        accounts.capacity = fleet_capacity(d)
        if d.usage.freed and not only:
            # A tenant gave back usage: what its quota held back may fit anywhere, not only
            # on the worker that freed room. One pass over the whole queue and fleet.
            d.usage.freed.clear()
            shapes, workers = None, None
    fleet = d.registry.index() if workers is None else [w.view() for w in workers if w.dispatchable]
    if not fleet:
        return []
    placements = _hold(d, schedule(
        d.queue, fleet, shapes=shapes, cache=d.feasibility, aging=d.aging, now=d.clock(),
        whole_fleet=workers is None, starving_first=starving_first, accounts=accounts,
        placement=d.settings.placement,
    ))  # fmt: skip
    if workers is not None:
        # A gang's members are on several workers: room freed on a few of them may complete a gang
        # only with room elsewhere, so pending gangs get their pass over the whole fleet too.
        gang_shapes = d.queue.gang_shapes()
        if gang_shapes:
            placements += _hold(d, schedule(
                d.queue, d.registry.index(), shapes=gang_shapes, cache=d.feasibility, aging=d.aging,
                now=d.clock(), starving_first=False, accounts=accounts, placement=d.settings.placement,
            ))  # fmt: skip
    for placement in placements:
        d.flow.placed(placement.execution_id)  # a rate budget may admit its next one
    return placements


def _hold(d: Handle, placements: list[Placement]) -> list[Placement]:
    """Take ``placements`` out of the queue and reserve them on their workers (every member's)."""
    for placement in placements:
        d.queue.remove(placement.execution_id)
        for worker, gpus in gangs.member_workers(placement):  # a gang: every member's worker
            d.registry.entries[worker].hold(placement.execution_id, placement.shape.requests, gpus)
    return placements


def scheduled_row(execution: Execution, placement: Placement, now: float) -> Execution:
    """The one way an execution becomes SCHEDULED: on its placement's worker, one generation on.

    One server pushes it as it is (not stored: an unclaimed dispatch goes back to CREATED after
    a restart anyway). Replicas send it as their claim, and PostgreSQL applies the same rule to
    the row as stored (flux/store/postgres/writer.py): a replica's mirror of a pending row does
    not know its generation; the row the claim returns is the one pushed.
    """
    return gangs.placed(
        execution.evolve(
            state=State.SCHEDULED,
            worker=placement.worker,
            generation=execution.generation + 1,
            gpu_indices=placement.gpu_indices,
            updated_at=now,
        ),
        placement,
    )


def apply(d: Handle, results: list[Bound]) -> None:
    """What the bind said, placement by placement (Kubernetes runs Unreserve the same way).

    BOUND: pushed to its worker, unless it was cancelled meanwhile (unreserve) or its worker
    left or moved (the row goes back in line). LOST: unreserved and forgotten here. REFUSED,
    FAILED: unreserved and back in line; after FAILED no pass runs now (the safety tick tries
    again: no hot loop against a database that is down).
    """
    freed: dict[str, WorkerEntry] = {}
    for result in results:
        placement, row = result.placement, result.row
        execution_id = placement.execution_id
        entry = d.registry.get(placement.worker)
        current = d.table.get(execution_id)
        if result.outcome is Outcome.BOUND and row is not None and current is not None:
            held = entry is not None and (
                execution_id in entry.queued if placement.queued else execution_id in entry.holdings
            )
            if placement.members:
                members = [d.registry.get(worker) for worker, _ in placement.members]
                if all(m is not None and m.dispatchable and execution_id in m.holdings for m in members):
                    push_gang(d, row, members, placement)  # type: ignore[arg-type]
                else:  # a member's worker left or moved meanwhile: the whole gang goes back
                    d.table.set(row)
                    housekeeping.requeue(d, row, entry, next_attempt=False)
            elif entry is not None and entry.dispatchable and held:
                push(d, row, entry, placement)
            else:  # the worker left or moved while the bind was in flight: give the row back
                d.table.set(row)
                housekeeping.requeue(d, row, entry, next_attempt=False)
            continue
        # Unreserve (every member's room, for a gang).
        for worker, _ in gangs.member_workers(placement):
            held = d.registry.get(worker)
            if held is not None and held.release(execution_id) and result.outcome is not Outcome.FAILED:
                freed[held.name] = held
        if current is None or current.state is not State.CREATED:
            continue  # cancelled while the bind was in flight
        if result.outcome is Outcome.LOST:
            d.table.drop(execution_id)
        elif result.outcome is not Outcome.BOUND:
            d.queue_up(current, placement.shape)
            if result.outcome is Outcome.REFUSED:
                d.reclaimer.refused(execution_id, placement.shape)
    if freed:
        d.passes.room_freed(freed.values())


def push(d: Handle, execution: Execution, entry: WorkerEntry, placement: Placement) -> None:
    """Send a bound dispatch (reserved on ``entry``) to its worker and start its ack deadline."""
    assert entry.session is not None  # dispatchable implies connected
    if d.events.traces is not None:
        execution = d.events.traces.dispatched(execution, placement.shape)
    d.table.set(execution)
    entry.session.push(Scheduled(execution, placement.shape.requests, placement.queued))
    d.events.dispatched(execution)
    if placement.queued:
        d.events.counters.queued_dispatches += 1
    else:  # a queued one waits for room as long as it must: claimed when it starts
        d.timers.arm(
            Kind.ACK, execution.execution_id, execution.generation, d.clock() + d.settings.ack_deadline
        )
    d.watchers.notify(execution)


def push_gang(d: Handle, execution: Execution, members: list[WorkerEntry], placement: Placement) -> None:
    """``push`` for a gang: each member gets its own dispatch; one ack deadline for them all (the
    gang is RUNNING only once every member has claimed)."""
    if d.events.traces is not None:
        execution = d.events.traces.dispatched(execution, placement.shape)
    execution = gangs.push_members(d, execution, members, placement)
    d.events.dispatched(execution)
    d.timers.arm(Kind.ACK, execution.execution_id, execution.generation, d.clock() + d.settings.ack_deadline)
    d.watchers.notify(execution)


def fleet_capacity(d: Handle) -> Vector:
    """The fleet's totals: the fair share's denominators (its slots are the executions' one).
    O(workers), only with tenants' terms."""
    accepting = [e for e in d.registry.values() if e.accepting]
    return capacity_of((e.resources for e in accepting), sum(e.capacity for e in accepting))
