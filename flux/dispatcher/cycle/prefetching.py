"""The part of a scheduling pass that queues work ahead at pipelining workers (``--prefetch``):
after the ordinary pass has filled what rooms it could, ``flux.matching.prefetch`` decides what
goes into the workers' own queues, and this records it on their entries (nothing is reserved;
``WorkerEntry.claim_queued`` reserves at the claim). ``placing.py`` binds and pushes the result
with the rest of its pass.

Not with tenants' terms: a queued execution holds no room, so no quota would count it, and
preemption could not free a room its queue keeps to itself; nor at a worker nominated for a
starving execution, whose room must empty for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from flux.matching.prefetch import QueueSpace, queue_ahead

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.matching import Placement, Shape


def reserve_queued(
    d: Handle, shapes: list[Shape] | None, workers: Iterable[WorkerEntry] | None
) -> list[Placement]:
    """Queue ahead what the pass left pending (of ``shapes``, at ``workers`` when given)."""
    if not d.queue or d.usage.accounts is not None:
        return []
    hungry = d.registry.queue_space()
    if not hungry:
        return []
    if workers is not None:
        scope = {w.name for w in workers}
        hungry = [e for e in hungry if e.name in scope]
    nominated = d.aging.by_worker
    spaces = [
        QueueSpace(e.view(), e.depth - len(e.queued), len(e.queued))
        for e in hungry
        if e.name not in nominated
    ]
    held = d.flow.control.holds
    placements = queue_ahead(
        d.queue, spaces, shapes=shapes, cache=d.feasibility, eligible=lambda item: not held(item.execution_id)
    )
    now = d.clock()
    for placement in placements:
        item = d.queue.remove(placement.execution_id)
        priority = item.priority if item is not None else 0
        d.registry.entries[placement.worker].queue(
            placement.execution_id, placement.shape.requests, priority, now
        )
    return placements
