"""The dispatcher with a pipelining worker (--prefetch): queued without a reservation, reserved at the
claim, nothing placed in a room while its queue is not empty, and a queue taken back at once."""

from __future__ import annotations

import asyncio

import pytest

from flux.dispatcher.core import WorkerRegistration
from flux.dispatcher.state.lifecycle import Requeue
from flux.dispatcher.state.session import Scheduled, Stop
from flux.dispatcher.transitions.moving import MOVE_EVERY
from flux.domain.execution import State
from flux.domain.worker import WorkerSoftware
from flux.errors import FailedPrecondition
from flux.matching import Amounts
from flux.matching.prefetch import MOVE_AFTER
from tests.unit.harness import Flux, Worker, resources, settled

CREATED, SCHEDULED, RUNNING = State.CREATED, State.SCHEDULED, State.RUNNING


async def prefetching(flux: Flux, name: str = "w1", cpu: int = 2, prefetch: int = 2) -> Worker:
    registration = WorkerRegistration(
        name, resources(cpu), WorkerSoftware(), {}, capacity=cpu, prefetch=prefetch
    )
    worker = Worker(flux.d, name, await flux.d.register_worker(registration))
    worker.connect()
    return worker


def dispatches(worker: Worker) -> list[tuple[str, bool]]:
    return [(e.execution.execution_id, e.queued) for e in worker.events() if isinstance(e, Scheduled)]


async def test_beyond_its_room_queued_without_a_reservation_then_reserved_at_the_claim(flux):
    await flux.workflow(cpu=1)
    w = await prefetching(flux)
    ids = [await flux.run() for _ in range(6)]
    assert dispatches(w) == [(ids[0], False), (ids[1], False), (ids[2], True), (ids[3], True)]
    assert [flux.state(i) for i in ids] == [SCHEDULED] * 4 + [CREATED] * 2
    entry = flux.d.registry.entries["w1"]
    assert entry.reserved == Amounts(cpu=2) and list(entry.queued) == ids[2:4]
    # The first ends: nothing is placed in its room (the queue is not empty); the worker starts
    # the queue's first and claims it, which reserves, and the queue is refilled.
    w.claim(ids[0])
    w.claim(ids[1])
    await w.complete(ids[0])
    assert dispatches(w) == []
    assert entry.reserved == Amounts(cpu=1)
    assert w.claim(ids[2]).state is RUNNING
    assert entry.reserved == Amounts(cpu=2) and list(entry.queued) == [ids[3], ids[4]]
    assert dispatches(w) == [(ids[4], True)]


async def test_a_queue_grows_shallow_while_bodies_run_long_and_deep_again_when_they_turn_short(flux):
    await flux.workflow(cpu=1)
    w = await prefetching(flux, prefetch=4)
    entry = flux.d.registry.entries["w1"]
    ids = [await flux.run() for _ in range(40)]
    assert dispatches(w) == [(i, False) for i in ids[:2]] + [(i, True) for i in ids[2:6]]  # none run yet
    w.claim(ids[0])
    w.claim(ids[1])
    flux.clock.advance(2.0)
    await w.complete(ids[0])  # a body of two seconds: one queued covers the turnaround
    assert entry.body_s == 2.0 and entry.depth == 1
    w.claim(ids[2])
    await w.complete(ids[1])
    w.claim(ids[3])
    # Two started from the queue and nothing refilled it: it holds 2, more than its depth of 1.
    assert dispatches(w) == [] and list(entry.queued) == ids[4:6]
    # Bodies turn short (claimed and done at once): within a few results the queue is deep again.
    done = [ids[2], ids[3]]
    for _ in range(12):
        finishing = done.pop(0)
        await w.complete(finishing)
        started = next(i for i in entry.queued)
        w.claim(started)
        done.append(started)
        w.events()
    assert entry.body_s < 0.05 and entry.depth == 4
    assert len(entry.queued) == 4  # refilled to all of --prefetch


async def test_what_waits_in_a_stalled_queue_moves_to_a_worker_with_free_room(flux):
    await flux.workflow(cpu=1)
    busy = await prefetching(flux, "busy", cpu=1, prefetch=4)
    ids = [await flux.run() for _ in range(4)]
    assert dispatches(busy) == [(ids[0], False)] + [(i, True) for i in ids[1:]]
    busy.claim(ids[0])  # a long body: its queue waits behind it
    free = await flux.worker("free", cpu=1, capacity=1)
    assert free.scheduled() == []  # nothing is pending: all of it waits in busy's queue
    flux.d.housekeeper.tick(flux.clock.advance(MOVE_AFTER / 2))
    assert free.scheduled() == []  # not yet: a queue may wait that long behind short bodies
    flux.d.housekeeper.tick(flux.clock.advance(MOVE_AFTER / 2))
    await settled()  # back in line once its row is saved
    # Waited long enough now: the oldest goes to the worker with room, one (its room) and no more.
    assert [e.execution_id for e in busy.events() if isinstance(e, Stop)] == [ids[1]]
    assert free.scheduled() == [ids[1]]
    assert list(flux.d.registry.entries["busy"].queued) == ids[2:]
    assert flux.d.events.counters.requeued[Requeue.MOVED] == 1
    with pytest.raises(FailedPrecondition):
        busy.claim(ids[1], generation=1)  # it started it after all: refused, the body is stopped
    assert free.claim(ids[1]).state is RUNNING
    # free is idle again once its result is in: the next, which waited as long, moves at once
    # (not at the next step), once MOVE_EVERY has passed since the last look.
    flux.clock.advance(MOVE_EVERY)
    await free.complete(ids[1])
    await settled()
    assert free.scheduled() == [ids[2]]


async def test_what_waited_less_than_move_after_stays_in_its_queue(flux):
    await flux.workflow(cpu=1)
    busy = await prefetching(flux, "busy", cpu=1, prefetch=2)
    ids = [await flux.run() for _ in range(3)]
    free = await flux.worker("free", cpu=1, capacity=1)
    busy.events()
    busy.claim(ids[0])
    flux.clock.advance(MOVE_AFTER / 2)
    await busy.complete(ids[0])
    busy.claim(ids[1])
    flux.d.housekeeper.tick(flux.clock())  # ids[2] waited less than MOVE_AFTER
    await settled()
    assert free.scheduled() == [] and list(flux.d.registry.entries["busy"].queued) == [ids[2]]


async def test_a_claim_beyond_the_room_is_refused_and_goes_back_in_line(flux):
    await flux.workflow(cpu=1)
    w = await prefetching(flux, prefetch=1)
    ids = [await flux.run() for _ in range(3)]
    w.events()
    with pytest.raises(FailedPrecondition, match="no room"):
        w.claim(ids[2])  # both cores are held: the server's count says no
    assert flux.state(ids[2]) is CREATED
    assert flux.d.registry.entries["w1"].reserved == Amounts(cpu=2)


async def test_while_a_queue_is_not_empty_freed_room_refills_the_queue(flux):
    await flux.workflow(cpu=1)
    w = await prefetching(flux, prefetch=1)
    ids = [await flux.run() for _ in range(3)]
    w.events()
    w.claim(ids[0])
    await w.complete(ids[0])
    # A core is free, but ids[2] waits in the worker's queue: nothing goes to the room directly.
    assert w.events() == []
    assert flux.d.registry.entries["w1"].reserved == Amounts(cpu=1)
    extra = await flux.run()
    assert flux.state(extra) is CREATED


async def test_cancel_takes_a_queued_execution_back_and_tells_the_worker(flux):
    await flux.workflow(cpu=1)
    w = await prefetching(flux)
    ids = [await flux.run() for _ in range(4)]
    w.events()
    await flux.d.cancel(ids[2])
    [stop] = [e for e in w.events() if isinstance(e, Stop)]
    assert stop.execution_id == ids[2]
    assert list(flux.d.registry.entries["w1"].queued) == [ids[3]]


@pytest.mark.parametrize("how", ["stream closed", "draining"])
async def test_a_worker_gone_or_draining_hands_its_queue_back_at_once(flux, how):
    await flux.workflow(cpu=1)
    w = await prefetching(flux)
    ids = [await flux.run() for _ in range(4)]
    w.events()
    w.claim(ids[0])
    if how == "stream closed":
        w.disconnect()
    else:
        w.report(resources(2), draining=True)
    # No grace for what never ran: the queued ones are back in line now, the running one keeps its.
    assert [flux.state(i) for i in ids] == [RUNNING, SCHEDULED, CREATED, CREATED]
    assert flux.d.registry.entries["w1"].queued == {}


async def test_explain_names_the_worker_and_the_place_in_its_queue(flux):
    await flux.workflow(cpu=1)
    await prefetching(flux)
    ids = [await flux.run() for _ in range(4)]
    assert (await flux.d.why(ids[2])).summary == "queued at worker w1 (1st)"
    assert (await flux.d.why(ids[3])).summary == "queued at worker w1 (2nd)"


async def test_gpu_executions_are_never_queued_ahead(flux):
    await flux.workflow(gpu=1)
    registration = WorkerRegistration("g", resources(2, gpus=1), WorkerSoftware(), {}, capacity=2, prefetch=4)
    w = Worker(flux.d, "g", await flux.d.register_worker(registration))
    w.connect()
    ids = [await flux.run() for _ in range(3)]
    assert dispatches(w) == [(ids[0], False)]
    assert [flux.state(i) for i in ids[1:]] == [CREATED, CREATED]


async def test_a_worker_without_prefetch_gets_nothing_queued(flux):
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=2)
    ids = [await flux.run() for _ in range(4)]
    assert dispatches(w) == [(ids[0], False), (ids[1], False)]


async def test_a_higher_priority_is_queued_ahead_of_lower_ones_and_explain_says_so(flux):
    await flux.workflow(cpu=1)
    w = await prefetching(flux, cpu=1, prefetch=2)
    blocker, low = await flux.run(), await flux.run()
    high = (await flux.d.submit("job", "", priority=5)).execution_id
    assert dispatches(w) == [(blocker, False), (low, True), (high, True)]
    assert (await flux.d.why(high)).summary == "queued at worker w1 (1st)"
    assert (await flux.d.why(low)).summary == "queued at worker w1 (2nd)"


async def test_a_new_stream_takes_the_old_streams_queue_back(flux):
    # The worker starts each stream with an empty queue; the old stream's end may reach us later.
    await flux.workflow(cpu=1)
    w = await prefetching(flux, cpu=1, prefetch=2)
    ids = [await flux.run() for _ in range(3)]
    w.events()
    w.claim(ids[0])
    w.connect()  # takes over its own stream before the old one's end is seen
    entry = flux.d.registry.entries["w1"]
    assert entry.queued == {} and flux.state(ids[1]) is CREATED
    await settled()  # the requeue is stored, then back in line
    # Back in line, and queued again on the new stream (one generation on: the old dispatch is fenced).
    assert dispatches(w) == [(ids[1], True), (ids[2], True)]
    assert flux.get(ids[1]).generation == 2
    assert list(entry.queued) == [ids[1], ids[2]]


async def test_a_pending_timeout_fires_for_an_execution_still_in_a_workers_queue(flux):
    from flux.domain.policy import PENDING_TIMEOUT, Policy
    from flux.domain.resource_request import ResourceRequest
    from flux.domain.workflow import WorkflowRecord

    declared = WorkflowRecord(
        "job", 0, "", "main", ResourceRequest(cpu=1), {}, 3, policy=Policy(pending_timeout=60.0)
    )
    await flux.d.register_workflows("job.py", "# job\n", [declared])
    w = await prefetching(flux, cpu=1, prefetch=1)
    ids = [await flux.run() for _ in range(2)]
    w.events()
    w.claim(ids[0])
    flux.expire(61)
    # The running one started in time; the queued one never did: it ends, and its worker drops it.
    assert flux.state(ids[0]) is RUNNING
    failed = flux.get(ids[1])
    assert (failed.state, failed.reason) == (State.FAILED, PENDING_TIMEOUT)
    assert [e.execution_id for e in w.events() if isinstance(e, Stop)] == [ids[1]]
    assert flux.d.registry.entries["w1"].queued == {}


async def test_a_look_that_fails_is_logged_and_the_next_one_still_moves(flux, caplog):
    await flux.workflow(cpu=1)
    busy = await prefetching(flux, "busy", cpu=1, prefetch=4)
    ids = [await flux.run() for _ in range(3)]
    busy.events()
    busy.claim(ids[0])
    free = await flux.worker("free", cpu=1, capacity=1)
    mover = flux.d.housekeeper.mover
    take_back, calls = mover._take_back, []

    def broken(*args):
        calls.append(args)
        raise RuntimeError("store gone")

    mover._take_back = broken
    flux.clock.advance(MOVE_AFTER)
    mover.soon(flux.d.registry.entries["free"])
    await settled()
    assert len(calls) == 1 and "moving queued executions failed" in caplog.text
    assert free.scheduled() == []
    # The failed look left nothing scheduled behind it: the next one is scheduled and moves.
    mover._take_back = take_back
    flux.clock.advance(MOVE_EVERY)
    mover.soon(flux.d.registry.entries["free"])
    await settled()
    assert free.scheduled() == [ids[1]]


async def test_a_look_scheduled_before_the_dispatcher_stops_never_runs(flux):
    await flux.workflow(cpu=1)
    busy = await prefetching(flux, "busy", cpu=1, prefetch=4)
    ids = [await flux.run() for _ in range(3)]
    busy.events()
    busy.claim(ids[0])
    await flux.worker("free", cpu=1, capacity=1)
    mover, looks = flux.d.housekeeper.mover, []
    mover._take_back = lambda *args: looks.append(args)
    flux.clock.advance(MOVE_AFTER)
    mover.soon(flux.d.registry.entries["free"])
    await flux.d.stop()
    await asyncio.sleep(2 * MOVE_EVERY)  # past when the look was due
    assert looks == []
    assert list(flux.d.registry.entries["busy"].queued) == ids[1:]
