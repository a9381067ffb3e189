"""Queueing ahead at pipelining workers (--prefetch): which pending executions go into which
worker's own queue (flux.matching.prefetch), and the worker's side of it (flux.worker.prefetch)."""

from __future__ import annotations

import pytest

from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources
from flux.matching import PendingQueue
from flux.matching.prefetch import (
    MOVE_AFTER,
    QUEUE_SECONDS,
    QueueSpace,
    Waiting,
    moves,
    queue_ahead,
    queue_depth,
)
from flux.worker.prefetch import LocalQueue, fits
from flux.worker.transport import Dispatch, WorkflowRef
from tests.unit.fleet import queue_of, repeat, shape, worker


def placed(placements):
    return [(p.execution_id, p.worker) for p in placements]


def space(name: str, free: int, queued: int = 0, **kwargs) -> QueueSpace:
    return QueueSpace(worker(name, **kwargs), free, queued)


# ---- how deep a queue goes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefetch", "body_s", "running", "depth"),
    [
        pytest.param(8, None, 2, 8, id="no body seen yet: all of --prefetch"),
        pytest.param(8, 0.0, 2, 8, id="bodies that end as they are claimed: all of it"),
        pytest.param(8, 0.005, 2, 8, id="5 ms bodies, two running: 20 in 50 ms, held to 8"),
        pytest.param(8, 0.02, 2, 5, id="20 ms bodies, two running: 5 in 50 ms"),
        pytest.param(8, 0.02, 0, 3, id="nothing running counts as one"),
        pytest.param(8, 1.0, 2, 1, id="bodies of a second: one queued, no more"),
        pytest.param(8, 3600.0, 16, 1, id="bodies of an hour: still one, so the next starts at once"),
        pytest.param(1, 3600.0, 1, 1, id="--prefetch 1 stays 1"),
        pytest.param(0, 0.0, 1, 0, id="--prefetch 0: nothing queued, however short the bodies"),
        pytest.param(0, 5.0, 1, 0, id="--prefetch 0 with long bodies: nothing queued"),
    ],
)
def test_a_queue_holds_about_queue_seconds_of_the_workers_bodies(prefetch, body_s, running, depth):
    assert QUEUE_SECONDS == 0.05  # the figures above are worked out for it
    assert queue_depth(prefetch, body_s, running) == depth


# ---- moving what waits in a stalled queue -------------------------------------------------------

NOW = 1_000.0


def waiting(execution_id: str, at: str = "busy", waited: float = MOVE_AFTER, **kwargs) -> Waiting:
    return Waiting(execution_id, at, shape(**{"cpu": 1, **kwargs}), NOW - waited)


def test_moves_only_what_waited_move_after_or_longer_longest_first_as_the_room_holds():
    queued = [
        waiting("young", waited=MOVE_AFTER / 2),
        waiting("old", waited=3.0),
        waiting("older", waited=9.0),
    ]
    assert moves(queued, [worker("free", cpu=1)], NOW) == [("older", "free")]  # one core: one of them
    assert moves(queued, [worker("free", cpu=4)], NOW) == [("older", "free"), ("old", "free")]
    assert moves(queued, [worker("free", cpu=4, capacity=1)], NOW) == [("older", "free")]


def test_moves_nothing_to_its_own_worker_nor_where_it_could_never_run():
    assert moves([waiting("e", at="w")], [worker("w")], NOW) == []
    labelled = waiting("e", affinity={"role": "gpu"})
    assert moves([labelled], [worker("plain")], NOW) == []
    assert moves([labelled], [worker("plain"), worker("tagged", labels={"role": "gpu"})], NOW) == [
        ("e", "tagged")
    ]


def test_moves_spread_over_the_idle_workers_in_turn_as_each_fills():
    queued = [waiting(f"e{n}", waited=10.0 - n) for n in range(3)]
    assert moves(queued, [worker("a", cpu=1), worker("b", cpu=1)], NOW) == [("e0", "a"), ("e1", "b")]
    assert moves(queued, [], NOW) == []


# ---- the pure pass --------------------------------------------------------------------------------


def test_queues_in_submission_order_up_to_each_workers_space():
    queue = queue_of(*repeat(5, shape(cpu=1)))
    placements = queue_ahead(queue, [space("w", 2)])
    assert placed(placements) == [("e0", "w"), ("e1", "w")]
    assert all(p.queued and p.gpu_indices == () for p in placements)


def test_spreads_over_workers_most_space_first_then_shortest_queue_then_name():
    queue = queue_of(*repeat(5, shape(cpu=1)))
    placements = queue_ahead(queue, [space("b", 2), space("a", 2), space("c", 1, queued=1)])
    assert placed(placements) == [("e0", "a"), ("e1", "b"), ("e2", "a"), ("e3", "b"), ("e4", "c")]


def test_priority_first_then_fifo_across_shapes():
    queue = PendingQueue()
    queue.add("low-old", shape(cpu=1), 1)
    queue.add("high-young", shape(memory="1Gi"), 2, priority=5)
    queue.add("low-young", shape(cpu=1), 3)
    placements = queue_ahead(queue, [space("w", 2)])
    assert [p.execution_id for p in placements] == ["high-young", "low-old"]


@pytest.mark.parametrize(
    ("request_shape", "queued"),
    [
        pytest.param(shape(cpu=4), True, id="fits the idle worker exactly, though not its room now"),
        pytest.param(shape(cpu=5), False, id="more cores than the worker has"),
        pytest.param(shape(gpu=1), False, id="GPU executions are never queued ahead"),
        pytest.param(shape(cpu=1, affinity={"role": "gpu"}), False, id="label missing"),
    ],
)
def test_only_what_fits_the_worker_itself(request_shape, queued):
    # Busy now (no core free): queueing is about the worker, not its room.
    busy = QueueSpace(worker("w", cpu=4, cpu_available=0, reserved={"cpu": 4}, active=4), 2)
    placements = queue_ahead(queue_of(request_shape), [busy])
    assert bool(placements) is queued


def test_an_ineligible_execution_is_stepped_over_not_blocking():
    queue = queue_of(*repeat(3, shape(cpu=1)))
    placements = queue_ahead(queue, [space("w", 2)], eligible=lambda item: item.execution_id != "e0")
    assert [p.execution_id for p in placements] == ["e1", "e2"]


def test_scoped_to_shapes_and_reads_the_queue_without_changing_it():
    one, two = shape(cpu=1), shape(cpu=2)
    queue = queue_of(("a", one), ("b", two))
    placements = queue_ahead(queue, [space("w", 4)], shapes=[two])
    assert [p.execution_id for p in placements] == ["b"]
    assert len(queue) == 2


def test_nothing_without_space():
    assert queue_ahead(queue_of(shape(cpu=1)), [space("w", 0)]) == []
    assert queue_ahead(PendingQueue(), [space("w", 3)]) == []


# ---- the worker's own queue ----------------------------------------------------------------------

TOTALS = WorkerResources(cpu_total=2, cpu_available=2, memory_total=8 << 30, memory_available=8 << 30)


def dispatch(execution_id: str, cpu: int = 1, priority: int = 0) -> Dispatch:
    return Dispatch(
        execution_id,
        1,
        1,
        "null",
        WorkflowRef("w", 1, "h", "f"),
        (),
        ResourceRequest(cpu=cpu),
        queued=True,
        priority=priority,
    )


@pytest.mark.parametrize(
    ("need", "running", "capacity", "expected"),
    [
        pytest.param(1, [1], 4, True, id="a core left"),
        pytest.param(1, [1, 1], 4, False, id="every core held"),
        pytest.param(2, [], 4, True, id="exact fit"),
        pytest.param(0, [1, 1], 2, False, id="at capacity"),
        pytest.param(0, [1, 1], 3, True, id="no cores asked, a slot left"),
    ],
)
def test_fits_counts_what_running_executions_hold(need, running, capacity, expected):
    held = [ResourceRequest(cpu=c) for c in running]
    assert fits(ResourceRequest(cpu=need), held, capacity, TOTALS) is expected


def test_local_queue_starts_in_order_and_the_first_waits_for_room():
    queue = LocalQueue()
    for d in (dispatch("a"), dispatch("big", cpu=2), dispatch("c")):
        queue.add(d)
    # One core free: "a" starts; "big" needs two and waits, and "c" waits behind it (strict order).
    assert [d.execution_id for d in queue.ready([ResourceRequest(cpu=1)], 16, TOTALS)] == ["a"]
    assert [d.execution_id for d in queue.ready([ResourceRequest(cpu=1)], 16, TOTALS)] == []
    assert [d.execution_id for d in queue.ready([], 16, TOTALS)] == ["big"]
    assert [d.execution_id for d in queue.ready([], 16, TOTALS)] == ["c"]
    assert len(queue) == 0


def test_local_queue_drop_and_clear():
    queue = LocalQueue()
    queue.add(dispatch("a"))
    queue.add(dispatch("b"))
    assert not queue.drop("a", generation=2)  # another dispatch of it: not this one
    assert queue.drop("a", generation=1)
    assert "a" not in queue and "b" in queue
    assert queue.clear() == 1 and len(queue) == 0


def test_local_queue_puts_a_higher_priority_ahead_first_come_first_within_one():
    queue = LocalQueue()
    for d in (
        dispatch("low-1"),
        dispatch("high-1", priority=5),
        dispatch("low-2"),
        dispatch("high-2", priority=5),
    ):
        queue.add(d)
    started = [d.execution_id for d in queue.ready([], 16, None)]
    assert started == ["high-1", "high-2", "low-1", "low-2"]


def test_a_worker_with_a_queue_takes_nothing_in_its_room_and_says_why():
    from flux.matching.filters import fits_now, rejections
    from flux.matching.view import Room

    view = worker("w", cpu=4, queued=2)
    assert not fits_now(shape(cpu=1), Room(view))
    [why] = rejections(shape(cpu=1), view)
    assert (why.detail, why.permanent) == ("has 2 queued ahead (its own queue goes first)", False)


async def test_a_queued_claim_waits_for_the_results_whose_room_it_took():
    import asyncio

    from flux.worker.prefetch import ResultsInFlight, after_results

    in_flight = ResultsInFlight()
    earlier = in_flight.begin()
    after = in_flight.snapshot()
    later = in_flight.begin()  # a result that came after the claim's start: not waited for
    order: list[str] = []

    async def claim() -> str:
        order.append("claim sent")
        return "claimed"

    task = asyncio.ensure_future(after_results(after, claim))
    await asyncio.sleep(0)
    assert order == [] and not task.done()
    in_flight.end(earlier)
    assert await task == "claimed" and order == ["claim sent"]
    assert in_flight.snapshot() == (later,)
    assert await after_results((), claim) == "claimed"  # nothing in flight: at once
