"""One scheduling pass: the fleet's views → the pure ``schedule`` → reserve on the workers → the
mode's bind → push to the workers' streams. ``passes.py`` decides when a pass runs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from flux.dispatcher.state.session import Scheduled
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
    placements = reserve(d, shapes, workers, starving_first, only)
    if placements:
        d.binder.bind(placements)
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
    placements = schedule(
        d.queue,
        fleet,
        shapes=shapes,
        cache=d.feasibility,
        aging=d.aging,
        now=d.clock(),
        whole_fleet=workers is None,
        starving_first=starving_first,
        accounts=accounts,
    )
    for placement in placements:
        d.queue.remove(placement.execution_id)
        d.registry.entries[placement.worker].hold(
            placement.execution_id, placement.shape.requests, placement.gpu_indices
        )
    return placements


def push(d: Handle, execution: Execution, entry: WorkerEntry, placement: Placement) -> None:
    """Send a bound dispatch (reserved on ``entry``) to its worker and start its ack deadline."""
    assert entry.session is not None  # dispatchable implies connected
    if d.events.traces is not None:
        execution = d.events.traces.dispatched(execution, placement.shape)
    d.table.set(execution)
    entry.session.push(Scheduled(execution, placement.shape.requests))
    d.events.dispatched(execution)
    d.deadlines.start(execution.execution_id, execution.generation, d.clock() + d.settings.ack_deadline)
    d.watchers.notify(execution)


def fleet_capacity(d: Handle) -> Vector:
    """The fleet's totals: the fair share's denominators. O(workers), only with tenants' terms."""
    return capacity_of(e.resources for e in d.registry.values() if e.accepting)
