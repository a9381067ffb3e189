"""Placement policies (issue 45): spread (least loaded first, the default) and binpack.

- ``pick_gpus``: the device set that keeps the largest aligned blocks whole;
- ``pack_key``: the order binpack tries workers in;
- a pass under binpack fills the fullest capable worker first, takes the worker whose free GPU
  count is the smallest that fits, and spread still alternates;
- properties: every binpack placement goes to the capable room with the least pack key at that
  moment and passes every filter; a pass over the ``FleetIndex`` equals the pass over the list
  (binpack as the server's default, and workflows mixing both policies).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux.domain.placement import validate_placement
from flux.matching import Accounts, FeasibilityCache, Room, Shape, rejections, schedule
from flux.matching.index import FleetIndex
from flux.matching.placement import pack_key, pick_gpus
from flux.matching.view import WorkerView, view_pack_key
from tests.unit.fleet import queue_of, shape, worker
from tests.unit.test_matching_properties import _as_tuples, scenarios

SETTINGS = settings(max_examples=200, deadline=None)


@pytest.mark.parametrize(
    ("free", "count", "expected"),
    [
        pytest.param(list(range(8)), 1, (0,), id="one of eight: the lowest, in the lowest block"),
        pytest.param(
            list(range(1, 8)), 2, (2, 3), id="two beside a taken one: its buddy pair, 4-7 stay whole"
        ),
        pytest.param([1, 2, 3, 4, 5, 6, 7], 1, (1,), id="one: next to the taken one"),
        pytest.param([1, 4, 5, 6, 7], 1, (1,), id="one: the lone free device, not a whole block"),
        pytest.param([1, 2, 3, 4, 5, 6, 7], 4, (4, 5, 6, 7), id="four: the whole free block"),
        pytest.param([2, 3, 4, 5, 6, 7], 2, (2, 3), id="two: the half-used block first"),
        pytest.param([0, 1, 2, 4, 5, 6, 7], 3, (0, 1, 2), id="three: the block with three free"),
        pytest.param([1, 3, 5, 7], 2, (1, 3), id="scattered: the lower block"),
        pytest.param(
            [0, 1, 2, 3, 5, 6, 7], 6, (0, 1, 2, 5, 6, 7), id="six of seven: the fuller block emptied first"
        ),
        pytest.param(list(range(8)), 8, tuple(range(8)), id="all eight"),
        pytest.param([3, 9], 1, (3,), id="indices past one power of two"),
        pytest.param([0, 1], 0, (), id="none asked"),
    ],
)
def test_pick_gpus_keeps_aligned_blocks_whole(free, count, expected):
    assert pick_gpus(free, count) == expected


@given(st.sets(st.integers(0, 15), min_size=1), st.data())
def test_pick_gpus_picks_count_distinct_free_devices(free, data):
    count = data.draw(st.integers(0, len(free)))
    picked = pick_gpus(sorted(free, reverse=True), count)
    assert len(picked) == count and len(set(picked)) == count and set(picked) <= free
    assert list(picked) == sorted(picked)


def test_pack_key_orders_fewest_free_gpus_then_fewest_free_cores_then_fullest():
    keys = [
        pack_key(0, 4, 1, 16, "zeta"),  # no GPU free
        pack_key(2, 1, 0, 16, "c"),  # 2 GPUs and 1 core free
        pack_key(2, 4, 1, 16, "b"),  # 2 GPUs and 4 cores free, one running
        pack_key(2, 4, 0, 16, "a"),  # the same, idle
        pack_key(8, 0, 4, 16, "d"),
    ]
    assert sorted(keys) == keys
    assert pack_key(0, 1, 3, 4, "x") < pack_key(0, 1, 1, 4, "a")  # 3/4 full before 1/4
    view = worker("w", cpu=4, gpus=3, active=1, held_gpus=[0])
    assert view_pack_key(view) == Room(view).pack_key() == (2, 4, -1 / 16, "w")


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("pack", ValueError),
        ("Binpack", ValueError),
        ("", ValueError),
        (None, TypeError),
        (1, TypeError),
    ],
)
def test_invalid_placements_are_refused_naming_the_field(value, error):
    with pytest.raises(error, match=r"placement must be 'spread' .* or 'binpack'"):
        validate_placement(value)


def test_the_servers_default_may_be_left_empty_where_allowed():
    assert validate_placement("", allow_empty=True) == ""
    assert validate_placement("binpack") == "binpack"


def _fleet(n: int = 3, **kwargs) -> list[WorkerView]:
    return [worker(f"w{i}", cpu=4, capacity=4, **kwargs) for i in range(n)]


def _workers_of(placements) -> list[str]:
    return [p.worker for p in placements]


def test_spread_alternates_and_binpack_fills_one_worker_before_the_next():
    job = shape(cpu=1)
    queue = lambda: queue_of(*[job] * 6)  # noqa: E731
    assert _workers_of(schedule(queue(), _fleet())) == ["w0", "w1", "w2", "w0", "w1", "w2"]
    packed = _workers_of(schedule(queue(), _fleet(), placement="binpack"))
    assert packed == ["w0", "w0", "w0", "w0", "w1", "w1"]


def test_binpack_prefers_the_busiest_worker_that_fits():
    fleet = [
        worker("idle", cpu=8, capacity=8),
        worker("busy", cpu=8, capacity=8, active=5, reserved={"cpu": 5}),
        worker("full", cpu=8, capacity=8, active=7, reserved={"cpu": 7}),
    ]
    placed = schedule(queue_of(shape(cpu=2), shape(cpu=1), shape(cpu=1)), fleet, placement="binpack")
    # cpu=2 does not fit "full" (1 core left): the busiest that fits; the 1-core ones fill "full" first.
    assert _workers_of(placed) == ["busy", "full", "busy"]


def test_binpack_takes_the_worker_whose_free_gpu_count_is_the_smallest_that_fits():
    fleet = [
        worker("eight", gpus=8),
        worker("three", gpus=8, held_gpus=range(5), active=1),
        worker("one", gpus=8, held_gpus=range(7), active=1),
    ]
    placed = schedule(queue_of(shape(gpu=1), shape(gpu=2), shape(gpu=8)), fleet, placement="binpack")
    assert [(p.worker, p.gpu_indices) for p in placed] == [
        ("one", (7,)),
        ("three", (6, 7)),  # of 5, 6, 7: the aligned pair 6-7, not 5-6 across two pairs
        ("eight", tuple(range(8))),  # still whole
    ]
    spread = schedule(queue_of(shape(gpu=1), shape(gpu=2), shape(gpu=8)), fleet)
    assert _workers_of(spread) == ["eight", "eight"]  # the 8-GPU job then waits


def test_a_workflows_own_placement_wins_over_the_servers():
    packed = Shape(shape(cpu=1).requests, placement="binpack")
    spread = Shape(shape(cpu=2).requests, placement="spread")
    queue = queue_of(packed, packed, spread, spread)
    placed = schedule(queue, _fleet(), placement="spread")
    assert _workers_of(placed) == ["w0", "w0", "w1", "w2"]
    placed = schedule(queue_of(packed, packed, spread, spread), _fleet(), placement="binpack")
    assert _workers_of(placed) == ["w0", "w0", "w1", "w2"]


def test_binpack_with_tenants_fills_the_fullest_worker_too():
    accounts = Accounts()
    queue = queue_of(*[Shape(shape(cpu=1).requests, tenant=t) for t in ("a", "b", "a", "b")])
    placed = schedule(queue, _fleet(), accounts=accounts, placement="binpack")
    assert _workers_of(placed) == ["w0", "w0", "w0", "w0"]


def _with_placements(scn, policies) -> list[Shape]:
    return [
        Shape(s.requests, dict(s.affinity), s.runtime, s.tenant, policy)
        for s, policy in zip(scn.shape_objects, policies, strict=False)
    ]


def _queue(scn, shapes):
    return queue_of(*[(eid, shapes[i], seq) for eid, i, seq in scn.pending])


_POLICIES = st.lists(st.sampled_from(["", "spread", "binpack"]), min_size=3, max_size=3)


@SETTINGS
@given(scenarios(), _POLICIES, st.sampled_from(["spread", "binpack"]), st.booleans())
def test_every_binpack_placement_goes_to_the_fullest_capable_room(scn, policies, default, tenants):
    shapes = _with_placements(scn, policies)
    if tenants:
        shapes = [s.for_tenant(t) for s, t in zip(shapes, ("a", "b", "a"), strict=False)]
    accounts = Accounts() if tenants else None
    placements = schedule(_queue(scn, shapes), scn.views, placement=default, accounts=accounts)
    rooms = {v.name: Room(v) for v in scn.views}
    for p in placements:
        room = rooms[p.worker]
        assert rejections(p.shape, room.view, room) == []
        capable = [r for r in rooms.values() if not rejections(p.shape, r.view, r)]
        packs = (p.shape.placement or default) == "binpack"
        if packs:
            assert min(r.pack_key() for r in capable) == room.pack_key()
        else:
            assert min(r.key for r in capable) == room.key
        r = p.shape.requests
        assert room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory, pack=packs) == p.gpu_indices


@SETTINGS
@given(
    scenarios(),
    _POLICIES,
    st.sampled_from(["spread", "binpack"]),
    st.randoms(use_true_random=False),
    st.booleans(),
    st.sampled_from([None, 1, 3]),
    st.booleans(),
)
def test_an_indexed_binpack_pass_places_what_the_full_scan_places(
    scn, policies, default, rnd, scoped, limit, tenants
):
    """With ``tenants`` the pass goes through the fair-share loop (``place_fairly``)."""
    shapes = _with_placements(scn, policies)
    if tenants:
        shapes = [s.for_tenant(t) for s, t in zip(shapes, ("a", "b", "a"), strict=False)]
    only = [shapes[0]] if scoped else None
    accounts = Accounts() if tenants else None
    full = schedule(
        _queue(scn, shapes), scn.views, shapes=only, limit=limit, placement=default, accounts=accounts
    )
    index = FleetIndex()
    views = list(scn.views)
    random.Random(rnd.random()).shuffle(views)
    for view in views:
        index.put(view)
    indexed = schedule(
        _queue(scn, shapes),
        index,
        shapes=only,
        limit=limit,
        cache=FeasibilityCache(),
        placement=default,
        accounts=accounts,
    )
    assert _as_tuples(indexed) == _as_tuples(full)


def test_the_index_keeps_the_pack_order_through_changes():
    index = FleetIndex()
    for i in range(4):
        index.put(worker(f"w{i}", gpus=8, held_gpus=range(i * 2), active=i))
    cache = FeasibilityCache()
    walked = [view.name for _, view in index.packed_candidates(shape(gpu=3), cache.permanent)]
    assert walked == ["w2", "w1", "w0"]  # 4, 6 and 8 free; w3 (2 free) is skipped by the bisect
    index.put(worker("w0", gpus=8, held_gpus=range(5), active=1))  # now 3 free
    index.discard("w2")
    index.put(worker("w9", gpus=8))
    walked = [view.name for _, view in index.packed_candidates(shape(gpu=3), cache.permanent)]
    assert walked == ["w0", "w1", "w9"]
    index.put(worker("w1", gpus=8, held_gpus=range(5), active=1, cpu=2))  # 3 GPUs and 2 cores free
    walked = [view.name for _, view in index.packed_candidates(shape(gpu=3, cpu=3), cache.permanent)]
    assert walked == ["w0", "w9"]  # w1: as many GPUs as asked, too few cores: skipped too
    index.put(worker("w1", gpus=8, held_gpus=range(4), active=1, cpu=2))  # 4 GPUs and 2 cores free
    walked = [view.name for _, view in index.packed_candidates(shape(gpu=3, cpu=3), cache.permanent)]
    assert walked == ["w0", "w9"]  # more GPUs than asked, too few cores: skipped at its own count
