"""One scheduling pass: FIFO, no head-of-line blocking, no double booking, least loaded first."""

from __future__ import annotations

import pytest

from flux.matching import FeasibilityCache, PendingQueue, candidates, schedule
from tests.unit.fleet import queue_of, repeat, shape, worker


def placed(placements):
    return [(p.execution_id, p.worker) for p in placements]


# ---- FIFO and head-of-line blocking ------------------------------------------------------------


def test_fifo_across_shapes_by_submission_not_shape_insertion():
    small, big = shape(cpu=2), shape(cpu=3)
    queue = PendingQueue()
    queue.add("young-big", big, 2)  # its shape enters the queue first...
    queue.add("old-small", small, 1)  # ...but this one was submitted first
    placements = schedule(queue, [worker("w", cpu=4)])
    assert placed(placements) == [("old-small", "w")]


def test_fifo_interleaves_shapes_in_submission_order():
    a, b = shape(cpu=1), shape(memory="1Gi")
    queue = queue_of(("a0", a), ("b1", b), ("a2", a), ("b3", b), ("a4", a))
    placements = schedule(queue, [worker("w", cpu=8)])
    assert [p.execution_id for p in placements] == ["a0", "b1", "a2", "b3", "a4"]


def test_unplaceable_old_execution_does_not_block_younger_shapes():
    queue = queue_of(("old-gpu", shape(gpu=1)), ("young-cpu", shape(cpu=1)))
    placements = schedule(queue, [worker("w", cpu=4)])
    assert placed(placements) == [("young-cpu", "w")]


def test_busy_old_execution_does_not_block_younger_smaller_ones():
    queue = queue_of(("old-4", shape(cpu=4)), ("young-1", shape(cpu=1)), ("young-2", shape(cpu=1)))
    placements = schedule(queue, [worker("w", cpu=4, cpu_available=2)])
    assert placed(placements) == [("young-1", "w"), ("young-2", "w")]


def test_older_execution_is_placed_before_a_younger_one_takes_the_space():
    queue = queue_of(("old-3", shape(cpu=3)), ("young-2", shape(cpu=2)))
    placements = schedule(queue, [worker("w", cpu=4)])
    assert placed(placements) == [("old-3", "w")]


def test_requeued_execution_keeps_its_original_place():
    shp = shape(cpu=2)
    queue = queue_of(("e5", shp, 5), ("e6", shp, 6), ("requeued", shp, 1))
    placements = schedule(queue, [worker("w", cpu=4)])
    assert [p.execution_id for p in placements] == ["requeued", "e5"]


def test_many_added_out_of_order_are_read_in_submission_order():
    # A replica mirroring older rows behind newer ones: each is in its place when the queue is read,
    # whether first, oldest, its position, or a walk, and a removal between adds keeps the rest sorted.
    shp = shape(cpu=1)
    queue = PendingQueue()
    for seq in (50, 40, 10, 30, 20):
        queue.add(f"e{seq}", shp, seq)
    assert queue.first(shp).execution_id == "e10"
    assert queue.position("e40") == 3
    queue.remove("e10")
    queue.add("e5", shp, 5)
    queue.add("e60", shp, 60)
    assert [p.execution_id for p in queue.iter_shape(shp)] == ["e5", "e20", "e30", "e40", "e50", "e60"]
    assert queue.oldest(shp).execution_id == "e5"


def test_unplaced_executions_stay_queued_untouched():
    queue = queue_of(*repeat(3, shape(cpu=4)))
    placements = schedule(queue, [worker("w", cpu=4)])
    assert [p.execution_id for p in placements] == ["e0"]
    assert len(queue) == 3  # schedule is pure: the dispatcher removes what it commits


# ---- no double booking ---------------------------------------------------------------------------

DOUBLE_BOOKING = [
    pytest.param(shape(cpu=2), worker(cpu=4), 2, id="ten cpu=2 on a 4-core worker"),
    pytest.param(shape(memory="6Gi"), worker(memory="16Gi"), 2, id="memory"),
    pytest.param(shape(disk="40Gi"), worker(disk="100Gi"), 2, id="disk"),
    pytest.param(shape(gpu=1), worker(gpus=3), 3, id="one GPU each on a 3-GPU worker"),
    pytest.param(shape(gpu=2), worker(gpus=3), 1, id="two GPUs each on a 3-GPU worker"),
    pytest.param(shape(), worker(capacity=3), 3, id="capacity"),
    pytest.param(shape(), worker(capacity=3, active=2), 1, id="capacity with running executions"),
    pytest.param(shape(cpu=2), worker(cpu=8, reserved={"cpu": 4}), 2, id="reservations already held"),
    pytest.param(
        shape(cpu=2),
        worker(cpu=8, cpu_available=6, reserved={"cpu": 2}, unreported={"cpu": 2}),
        2,
        id="unreported reservations",
    ),
]


@pytest.mark.parametrize(("shp", "view", "expected"), DOUBLE_BOOKING)
def test_no_double_booking_within_a_pass(shp, view, expected):
    placements = schedule(queue_of(*repeat(10, shp)), [view])
    assert len(placements) == expected
    assert [p.execution_id for p in placements] == [f"e{i}" for i in range(expected)]
    gpus = [i for p in placements for i in p.gpu_indices]
    assert len(gpus) == len(set(gpus)) == shp.requests.gpu * expected


def test_no_double_booking_across_shapes_sharing_a_worker():
    a, b = shape(cpu=2), shape(cpu=2, memory="1Gi")
    queue = queue_of(*[s for _ in range(3) for s in (a, b)])
    placements = schedule(queue, [worker("w", cpu=4)])
    assert [p.execution_id for p in placements] == ["e0", "e1"]


# ---- least loaded --------------------------------------------------------------------------------


def test_lowest_active_per_capacity_wins_over_free_cpu():
    fleet = [worker("a", cpu=32, active=2, capacity=4), worker("b", cpu=4, active=4, capacity=16)]
    assert placed(schedule(queue_of(shape(cpu=1)), fleet)) == [("e0", "b")]


def test_equal_load_prefers_the_most_free_cpu_fraction_not_most_cores():
    fleet = [
        worker("a", cpu=8, cpu_available=4),  # 4 free cores, half free
        worker("b", cpu=4, cpu_available=3),  # 3 free cores, three quarters free
    ]
    assert placed(schedule(queue_of(shape(cpu=1)), fleet)) == [("e0", "b")]


def test_equal_load_and_cpu_fraction_breaks_ties_by_name():
    fleet = [worker("w-b"), worker("w-c"), worker("w-a")]
    assert placed(schedule(queue_of(shape(cpu=1)), fleet)) == [("e0", "w-a")]


def test_least_loaded_skips_a_worker_that_cannot_fit():
    fleet = [worker("idle-small", cpu=1), worker("busy-big", cpu=8, active=8)]
    assert placed(schedule(queue_of(shape(cpu=2)), fleet)) == [("e0", "busy-big")]


def test_placements_spread_as_load_rises():
    fleet = [worker(f"w{i}", cpu=8) for i in range(4)]
    placements = schedule(queue_of(*repeat(6, shape(cpu=1))), fleet)
    assert placed(placements) == [
        ("e0", "w0"),
        ("e1", "w1"),
        ("e2", "w2"),
        ("e3", "w3"),
        ("e4", "w0"),
        ("e5", "w1"),
    ]


def test_load_raised_by_another_shape_is_seen():
    # "a" takes the first cpu execution; the memory execution must then prefer "b".
    a, b = shape(cpu=1), shape(memory="1Gi")
    placements = schedule(queue_of(("cpu", a), ("mem", b)), [worker("a"), worker("b")])
    assert placed(placements) == [("cpu", "a"), ("mem", "b")]


def test_labels_and_packages_exclude_a_less_loaded_worker():
    shp = shape(affinity={"role": "training"}, packages=["numpy>=2"])
    fleet = [
        worker("idle-no-label", packages={"numpy": "2.0"}),
        worker("idle-old-numpy", labels={"role": "training"}, packages={"numpy": "1.26"}),
        worker("busy-capable", labels={"role": "training"}, packages={"numpy": "2.0"}, active=10),
    ]
    assert placed(schedule(queue_of(shp), fleet)) == [("e0", "busy-capable")]


# ---- GPU assignment ------------------------------------------------------------------------------


def test_gpu_assignment_picks_free_indices_most_free_vram_first():
    view = worker("g", gpus=["10Gi", "70Gi", 0, "40Gi", "30Gi"], held_gpus={3})
    placements = schedule(queue_of(shape(gpu=2), shape(gpu=1), shape(gpu=1)), [view])
    assert [(p.execution_id, p.gpu_indices) for p in placements] == [("e0", (1, 4)), ("e1", (0,))]


def test_non_gpu_placements_get_no_gpus():
    placements = schedule(queue_of(shape(cpu=1)), [worker(gpus=2)])
    assert [p.gpu_indices for p in placements] == [()]


def test_gpu_execution_goes_to_a_worker_with_gpus():
    fleet = [worker("a-cpu-only"), worker("b-gpu", gpus=1, active=5)]
    placements = schedule(queue_of(shape(gpu=1)), fleet)
    assert [(p.worker, p.gpu_indices) for p in placements] == [("b-gpu", (0,))]


# ---- limit and scoping ---------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "expected"), [(0, 0), (1, 1), (3, 3), (10, 4), (None, 4)])
def test_limit_takes_the_oldest(limit, expected):
    a, b = shape(cpu=1), shape(memory="1Gi")
    queue = queue_of(a, b, a, b)
    placements = schedule(queue, [worker(cpu=8)], limit=limit)
    assert [p.execution_id for p in placements] == ["e0", "e1", "e2", "e3"][:expected]


def test_shapes_restricts_the_pass():
    a, b = shape(cpu=1), shape(memory="1Gi")
    queue = queue_of(a, b, a, b)
    placements = schedule(queue, [worker()], shapes=[b])
    assert [p.execution_id for p in placements] == ["e1", "e3"]
    assert all(p.shape == b for p in placements)


def test_shapes_not_in_the_queue_place_nothing():
    queue = queue_of(shape(cpu=1))
    assert schedule(queue, [worker()], shapes=[shape(cpu=2)]) == []
    assert schedule(queue, [worker()], shapes=[]) == []


def test_duplicate_shapes_never_place_an_execution_twice():
    shp = shape(cpu=1)
    queue = queue_of(*repeat(3, shp))
    placements = schedule(queue, [worker(cpu=8)], shapes=[shp, shape(cpu=1), shp])
    assert [p.execution_id for p in placements] == ["e0", "e1", "e2"]


def test_worker_subset_places_only_on_those_workers():
    fleet = [worker("a"), worker("b", active=3), worker("c")]
    placements = schedule(queue_of(*repeat(3, shape(cpu=1))), fleet[1:2])
    assert {p.worker for p in placements} == {"b"}
    assert len(placements) == 3


def test_no_workers_or_no_work_places_nothing():
    assert schedule(queue_of(shape()), []) == []
    assert schedule(PendingQueue(), [worker()]) == []


def test_workers_may_be_a_one_shot_iterable():
    placements = schedule(queue_of(shape(cpu=1)), iter([worker("a"), worker("b", active=1)]))
    assert placed(placements) == [("e0", "a")]


# ---- FeasibilityCache ----------------------------------------------------------------------------


def _mixed():
    train = shape(cpu=2, affinity={"role": "training"})
    gpu = shape(gpu=1, memory="8Gi")
    numpy = shape(packages=["numpy>=2"])
    queue = queue_of(train, gpu, numpy, train, gpu, numpy, train)
    fleet = [
        worker("t1", labels={"role": "training"}, packages={"numpy": "2.0"}),
        worker("t2", labels={"role": "training"}, packages={"numpy": "2.0"}, active=1),
        worker("g1", gpus=1, packages={"numpy": "1.26"}),
        worker("g2", gpus=2, memory="4Gi"),
    ]
    return queue, fleet


def test_feasibility_cache_reuse_gives_the_same_placements():
    queue, fleet = _mixed()
    fresh = schedule(queue, fleet)
    cache = FeasibilityCache()
    first = schedule(queue, fleet, cache=cache)
    second = schedule(queue, fleet, cache=cache)
    assert placed(fresh) == placed(first) == placed(second)
    # e4 (second GPU job) finds g1's only GPU taken and g2 too small; e6 finds t1 out of cores.
    assert placed(fresh) == [
        ("e0", "t1"),
        ("e1", "g1"),
        ("e2", "t2"),
        ("e3", "t1"),
        ("e5", "t2"),
        ("e6", "t2"),
    ]


def test_feasibility_cache_is_keyed_by_profile_not_by_name():
    shp = shape(affinity={"role": "training"})
    cache = FeasibilityCache()
    assert schedule(queue_of(shp), [worker("w")], cache=cache) == []
    # Same name, now labelled: a stale per-name verdict would still refuse it.
    assert placed(schedule(queue_of(shp), [worker("w", labels={"role": "training"})], cache=cache)) == [
        ("e0", "w")
    ]


def test_feasibility_cache_bounded_reset_keeps_answers_right():
    cache = FeasibilityCache(max_entries=1)
    fleet = [worker("a", memory="4Gi"), worker("b", memory="32Gi")]
    for _ in range(3):
        placements = schedule(queue_of(shape(memory="8Gi"), shape(memory="2Gi")), fleet, cache=cache)
        assert placed(placements) == [("e0", "b"), ("e1", "a")]


def test_identical_profiles_share_one_verdict(monkeypatch):
    calls = []
    real = candidates.permanent_rejection

    def counting(shp, view):
        calls.append(view.name)
        return real(shp, view)

    monkeypatch.setattr(candidates, "permanent_rejection", counting)
    cache = FeasibilityCache()
    # Twenty workers differing only in load: one profile, so one static check per shape.
    fleet = [worker(f"w{i}", active=i % 3, cpu_available=i % 4) for i in range(20)]
    placements = schedule(queue_of(shape(cpu=1), shape(memory="1Gi")), fleet, cache=cache)
    assert len(placements) == 2
    assert len(calls) == 2
    schedule(queue_of(shape(cpu=1)), fleet, cache=cache)
    assert len(calls) == 2
