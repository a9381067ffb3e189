"""A gang's members through the lifecycle: one execution, one generation, several workers.

The matcher places every member in one decision (``flux.matching.gangs``); from there each
member's worker holds the execution's id (members are on distinct workers, so the id is a
key on each), gets its own dispatch (the execution with its worker and GPUs, and the gang),
and claims and completes under the one generation. The execution is RUNNING once every member
has claimed and COMPLETED once every member has completed (``output`` is rank 0's). Anything
that ends the attempt on one member (an error, a release, a lost worker, an expired ack, a
cancel) ends it on all: ``stop_all`` tells every other member's worker to stop and frees every
member's room, and the gang goes back in line (or fails) as one attempt, its next dispatch one
generation on, so a late call from the attempt before is refused by fencing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flux.dispatcher.state.session import Scheduled, Stop
from flux.domain.execution import Execution, State

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.matching import Placement


def member_workers(placement: Placement) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each (worker, GPU indices) the placement reserves: its members, or its one worker."""
    return placement.members or ((placement.worker, placement.gpu_indices),)


def placed(execution: Execution, placement: Placement) -> Execution:
    """The gang's record for this dispatch: its members by rank (addresses filled at the push)."""
    if execution.gang is None or not placement.members:
        return execution
    return execution.evolve(gang=execution.gang.placed(tuple((w, "", g) for w, g in placement.members)))


def holders(d: Handle, execution: Execution) -> list[WorkerEntry]:
    """The entries of the workers that may hold ``execution`` now: its members, or its worker."""
    names = (
        execution.gang.workers
        if execution.gang is not None and execution.gang.members
        else (execution.worker,)
    )
    return [entry for name in names if name and (entry := d.registry.get(name)) is not None]


def push_members(
    d: Handle, execution: Execution, entries: list[WorkerEntry], placement: Placement
) -> Execution:
    """Send each member its dispatch (its own worker and GPUs, every member's address)."""
    assert execution.gang is not None
    by_name = {entry.name: entry for entry in entries}
    members = tuple((w, by_name[w].address if w in by_name else a, g) for w, a, g in execution.gang.members)
    execution = execution.evolve(gang=execution.gang.placed(members))
    d.table.set(execution)
    for worker, _, gpus in members:
        entry = by_name[worker]
        assert entry.session is not None
        entry.session.push(
            Scheduled(execution.evolve(worker=worker, gpu_indices=gpus), placement.shape.requests)
        )
    return execution


def stop_all(d: Handle, execution: Execution, reason: str, keep: str = "") -> list[WorkerEntry]:
    """End this attempt on every member: tell each worker (but ``keep``, whose call ends it) to stop,
    and free every member's room. Returns the entries that gave room back."""
    freed = []
    for entry in holders(d, execution):
        if entry.name != keep and entry.session is not None and execution.execution_id in entry.holdings:
            entry.session.push(Stop(execution.execution_id, execution.generation, reason))
        if entry.release(execution.execution_id):
            freed.append(entry)
    return freed


def reset(execution: Execution) -> Execution:
    """Back in line: no members, claims or outputs (the next attempt is placed anew)."""
    return execution if execution.gang is None else execution.evolve(gang=execution.gang.reset())


def ran(execution: Execution) -> bool:
    """Whether this attempt started somewhere: running, or for a gang, any member has claimed."""
    return execution.state is State.RUNNING or (execution.gang is not None and bool(execution.gang.claimed))


def is_member(execution: Execution, name: str) -> bool:
    gang = execution.gang
    return gang is not None and gang.rank_of(name) is not None


def claim(d: Handle, execution: Execution, name: str) -> Execution:
    """One member's claim: RUNNING once every member has claimed (the same attempt's retried claim
    is answered as it was)."""
    gang = execution.gang
    assert gang is not None
    rank = gang.rank_of(name)
    assert rank is not None
    if rank in gang.claimed:
        return execution
    now = d.clock()
    gang = gang.claim(rank)
    if not gang.all_claimed:
        claimed = execution.evolve(gang=gang, updated_at=now)
        d.table.update(claimed)
        d.table.save(claimed)
        return claimed
    running = execution.evolve(state=State.RUNNING, gang=gang, updated_at=now, started_at=now)
    d.table.update(running)
    d.events.claimed(running)
    d.table.save(running)
    d.timing.claimed(running)
    return running


def completed(d: Handle, execution: Execution, entry: WorkerEntry, output_json: str) -> Execution:
    """One member's result. Until the last, the gang stays RUNNING with the outputs so far (stored
    before the member is answered, since it forgets its result then); the last makes it COMPLETED,
    its output rank 0's."""
    gang = execution.gang
    assert gang is not None
    rank = gang.rank_of(entry.name)
    assert rank is not None
    gang = gang.complete(rank, output_json)
    entry.release(execution.execution_id)  # this member is done: its room is free now
    now = d.clock()
    if not gang.all_completed:
        partial = execution.evolve(gang=gang, updated_at=now)
        d.table.update(partial)
        return partial
    outputs = dict(gang.outputs)
    return execution.evolve(
        state=State.COMPLETED, gang=gang, output_json=outputs[0], updated_at=now, started_at=0.0
    )
