"""Gangs in the pure matcher: every member placed in one decision or none, topology, no deadlock."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flux.domain.gang import Gang
from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import Limits, Tenant
from flux.matching import PendingQueue, Shape, explain, schedule
from flux.matching.index import FleetIndex
from flux.matching.tenancy import Accounts
from tests.unit.fleet import worker


def gang_shape(
    size: int,
    cpu: int = 0,
    gpu: int = 0,
    same: str | None = None,
    spread: str | None = None,
    tenant: str = "default",
) -> Shape:
    return Shape(
        ResourceRequest(cpu=cpu or None, gpu=gpu or None),
        None,
        "python",
        tenant,
        gang=Gang(size, same, spread),
    )


def rack(name: str, value: str, cpu: int = 4, gpus: int = 0, **more) -> object:
    return worker(
        name, cpu=cpu, gpus=gpus, labels={"rack": value, "host": name, **more.pop("labels", {})}, **more
    )


# ---- table ---------------------------------------------------------------------------------------


CASES = [
    # (id, fleet, gang, placed workers or None)
    ("exact fit", [worker("a"), worker("b")], gang_shape(2, cpu=4), {"a", "b"}),
    ("one worker short", [worker("a"), worker("b")], gang_shape(3, cpu=1), None),
    ("one member too big", [worker("a", cpu=4), worker("b", cpu=2)], gang_shape(2, cpu=3), None),
    ("members never share a worker", [worker("a", cpu=64)], gang_shape(2, cpu=1), None),
    (
        "same rack: only r2 has three",
        [rack("a", "r1"), rack("b", "r1"), rack("c", "r2"), rack("d", "r2"), rack("e", "r2")],
        gang_shape(3, same="rack"),
        {"c", "d", "e"},
    ),
    (
        "same rack: no rack has three",
        [rack("a", "r1"), rack("b", "r1"), rack("c", "r2"), rack("d", "r2")],
        gang_shape(3, same="rack"),
        None,
    ),
    (
        "same rack: best fit leaves the big rack whole",
        [rack("a", "r1"), rack("b", "r1"), rack("c", "r2"), rack("d", "r2"), rack("e", "r2")],
        gang_shape(2, same="rack"),
        {"a", "b"},
    ),
    (
        "same rack: a worker without the label is no member",
        [worker("a"), worker("b")],
        gang_shape(2, same="rack"),
        None,
    ),
    (
        "spread rack: one per rack",
        [rack("a", "r1"), rack("b", "r1"), rack("c", "r2")],
        gang_shape(2, spread="rack"),
        {"a", "c"},
    ),
    (
        "spread rack: two racks for three",
        [rack("a", "r1"), rack("b", "r1"), rack("c", "r2")],
        gang_shape(3, spread="rack"),
        None,
    ),
    (
        "same zone, spread rack",
        [
            rack("a", "r1", labels={"zone": "z1"}),
            rack("b", "r1", labels={"zone": "z1"}),
            rack("c", "r2", labels={"zone": "z2"}),
            rack("d", "r3", labels={"zone": "z2"}),
        ],
        gang_shape(2, same="zone", spread="rack"),
        {"c", "d"},
    ),
    (
        "gpus per member",
        [worker("a", gpus=8), worker("b", gpus=8), worker("c", gpus=4)],
        gang_shape(2, gpu=8),
        {"a", "b"},
    ),
]


@pytest.mark.parametrize("fleet, shp, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gang_placement_table(fleet, shp, expected):
    queue = PendingQueue()
    queue.add("g", shp, 0)
    for workers in (fleet, _index(fleet)):
        placements = schedule(queue, workers)
        if expected is None:
            assert placements == []
        else:
            (p,) = placements
            assert {m[0] for m in p.members} == expected
            assert p.worker == p.members[0][0] and p.gpu_indices == p.members[0][1]


def test_gang_members_get_distinct_gpus_and_the_rest_backfills():
    fleet = [worker("a", cpu=8, gpus=8), worker("b", cpu=8, gpus=8)]
    queue = PendingQueue()
    queue.add("g", gang_shape(2, gpu=4), 0)
    queue.add("big", gang_shape(3, cpu=1), 1)  # can never fit: 2 workers
    queue.add("small", Shape(ResourceRequest(gpu=4)), 2)
    placements = schedule(queue, fleet)
    assert [p.execution_id for p in placements] == ["g", "small"]
    g = placements[0]
    assert sorted(m[0] for m in g.members) == ["a", "b"]
    assert all(len(m[1]) == 4 for m in g.members)


def test_a_gang_counts_as_one_unit_against_its_tenants_quota():
    accounts = Accounts([Tenant("t", quota=Limits(gpu=8))])
    fleet = [worker(f"w{i}", gpus=8) for i in range(4)]
    queue = PendingQueue()
    queue.add("too-big", gang_shape(2, gpu=8, tenant="t"), 0)  # 16 GPUs: over its quota of 8
    queue.add("fits", gang_shape(2, gpu=4, tenant="t"), 1)  # 8 GPUs: exactly its quota
    queue.add("after", gang_shape(2, gpu=1, tenant="t"), 2)  # the quota is spent
    placements = schedule(queue, fleet, accounts=accounts)
    assert [p.execution_id for p in placements] == ["fits"]


def _index(views):
    index = FleetIndex()
    for view in views:
        index.put(view)
    return index


# ---- properties ------------------------------------------------------------------------------------

RACKS = ["r1", "r2", "r3"]


@st.composite
def fleets(draw):
    n = draw(st.integers(1, 7))
    return [
        (
            f"w{i}",
            draw(st.integers(1, 8)),
            draw(st.sampled_from([0, 0, 2, 4, 8])),
            draw(st.sampled_from(RACKS)),
        )
        for i in range(n)
    ]


@st.composite
def gangs(draw):
    topology = draw(st.sampled_from(["none", "same", "spread"]))
    return (
        draw(st.integers(1, 4)),
        draw(st.integers(0, 4)),
        draw(st.sampled_from([0, 0, 1, 4])),
        topology,
    )


def _shape(g, tenant: str = "default") -> Shape:
    size, cpu, gpu, topology = g
    return gang_shape(
        size,
        cpu=cpu,
        gpu=gpu,
        same="rack" if topology == "same" else None,
        spread="rack" if topology == "spread" else None,
        tenant=tenant,
    )


def _views(fleet, held):
    """Each worker as the matcher sees it with ``held[name]`` = (cpu, gpu indices, executions) taken."""
    views = []
    for name, cpu, gpus, value in fleet:
        taken_cpu, taken_gpus, active = held.get(name, (0, frozenset(), 0))
        views.append(
            worker(
                name,
                cpu=cpu,
                gpus=gpus,
                labels={"rack": value},
                reserved={"cpu": taken_cpu},
                cpu_available=cpu - taken_cpu,
                held_gpus=taken_gpus,
                active=active,
            )
        )
    return views


def _feasible_idle(fleet, g) -> bool:
    """The oracle, independent of the matcher: could the gang run on the idle fleet at all?"""
    size, cpu, gpu, topology = g
    fit = [(name, value) for name, c, gs, value in fleet if c >= cpu and gs >= gpu]
    if topology == "none":
        return len(fit) >= size
    if topology == "spread":
        return len({value for _, value in fit}) >= size
    return any(sum(1 for _, v in fit if v == value) >= size for value in RACKS)


def _check(placements, shapes, fleet, held):
    """All or nothing, distinct workers, topology, and never beyond any worker's room."""
    by_name = {name: (cpu, gpus, value) for name, cpu, gpus, value in fleet}
    for p in placements:
        g = shapes[p.execution_id]
        size, cpu, gpu, topology = g
        workers = [m[0] for m in p.members]
        assert len(workers) == size and len(set(workers)) == size
        values = [by_name[w][2] for w in workers]
        if topology == "same":
            assert len(set(values)) == 1
        if topology == "spread":
            assert len(set(values)) == size
        for name, gpu_indices in p.members:
            assert len(gpu_indices) == gpu
            taken_cpu, taken_gpus, active = held.get(name, (0, frozenset(), 0))
            assert not taken_gpus & set(gpu_indices)
            held[name] = (taken_cpu + cpu, taken_gpus | set(gpu_indices), active + 1)
            assert held[name][0] <= by_name[name][0]
            assert len(held[name][1]) <= by_name[name][1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), pending=st.lists(gangs(), min_size=1, max_size=8), data=st.data())
def test_all_or_nothing_and_no_deadlock(fleet, pending, data):
    """Random fleets, gangs and arrival orders, random completions: no partial gang ever holds room,
    nothing is over any worker's room, and every gang that could run on the idle fleet does run
    (while nothing runs, a pass places something: two gangs never wait on each other). With or
    without tenants (the fair-share pass) and priorities."""
    order = data.draw(st.permutations(range(len(pending))))
    tenanted = data.draw(st.booleans())
    accounts = Accounts([Tenant("t0"), Tenant("t1", weight=2.0)]) if tenanted else None
    shapes = {
        f"g{i}": _shape(pending[i], f"t{i % 2}" if tenanted else "default") for i in range(len(pending))
    }
    queue = PendingQueue()
    for seq, i in enumerate(order):
        queue.add(f"g{i}", shapes[f"g{i}"], seq, priority=data.draw(st.sampled_from([0, 0, 5])))
    held: dict[str, tuple] = {}
    running: dict[str, list] = {}
    done: set[str] = set()
    use_index = data.draw(st.booleans())
    for _ in range(4 * len(pending) + 4):
        views = _views(fleet, held)
        placements = schedule(queue, _index(views) if use_index else views, accounts=accounts)
        _check(placements, {k: pending[int(k[1:])] for k in shapes}, fleet, held)
        for p in placements:
            queue.remove(p.execution_id)
            running[p.execution_id] = list(p.members)
        if not running:
            # Nothing holds anything: whatever is still pending must be unable to run at all.
            assert all(not _feasible_idle(fleet, pending[int(e[1:])]) for e in shapes if e in queue)
            break
        finishing = data.draw(st.sets(st.sampled_from(sorted(running)), min_size=1))
        for execution_id in finishing:
            size, cpu, gpu, _ = pending[int(execution_id[1:])]
            for name, gpu_indices in running.pop(execution_id):
                taken_cpu, taken_gpus, active = held[name]
                held[name] = (taken_cpu - cpu, taken_gpus - set(gpu_indices), active - 1)
            done.add(execution_id)
    feasible = {e for e in shapes if _feasible_idle(fleet, pending[int(e[1:])])}
    assert feasible <= done | set(running)


@settings(max_examples=100, deadline=None)
@given(fleet=fleets(), pending=st.lists(gangs(), min_size=1, max_size=6))
def test_worker_order_and_the_index_do_not_change_the_answer(fleet, pending):
    queue = PendingQueue()
    for i, g in enumerate(pending):
        queue.add(f"g{i}", _shape(g), i)
    views = _views(fleet, {})
    expected = [(p.execution_id, p.members) for p in schedule(queue, views)]
    assert [(p.execution_id, p.members) for p in schedule(queue, list(reversed(views)))] == expected
    assert [(p.execution_id, p.members) for p in schedule(queue, _index(views))] == expected


# ---- explain ---------------------------------------------------------------------------------------


def _racks():
    return [
        rack("a", "r1", gpus=8),
        rack("b", "r1", gpus=8),
        rack("c", "r2", gpus=8),
        rack("d", "r2", gpus=8),
        rack("e", "r2", gpus=8, held_gpus=[0]),
        worker("x"),
    ]


def test_explain_a_gang_that_no_rack_can_ever_hold():
    found = explain(gang_shape(4, gpu=8, same="rack"), _racks())
    assert found.summary.startswith(
        "gang of 4 × gpu=8 same rack: racks r1 (2 workers can take a member), r2 (2): no rack has 4"
        " even idle: infeasible; 1 worker lacks label rack; members: 4/6 workers can run it"
    )
    assert found.infeasible


def test_explain_a_busy_gang():
    found = explain(gang_shape(3, gpu=8, same="rack"), _racks())
    assert "no rack has 3 (busy: rack r2 has 3 when their work ends)" in found.summary
    assert not found.infeasible


def test_explain_spread_and_plain_gangs():
    spread = explain(gang_shape(3, gpu=8, spread="rack"), _racks())
    assert spread.summary.startswith(
        "gang of 3 × gpu=8 spread rack: 2 racks have a worker that can take a member"
    )
    assert spread.infeasible
    plain = explain(gang_shape(5, gpu=8), _racks())
    assert plain.summary.startswith("gang of 5 × gpu=8: 4 workers can take a member, 5 needed (busy: 5 could")
    assert not plain.infeasible


def test_a_gang_that_would_not_fit_whole_preempts_nothing_but_a_single_run_may():
    # One worker: its borrowed run's stop would make room for one member of two, so the gang plans
    # no victim (tests/unit/test_gang_preemption.py has gangs that do).
    from flux.matching import Running, plan_preemption

    accounts = Accounts(
        [Tenant("ml", quota=Limits(cpu=4), cohort="c"), Tenant("web", quota=Limits(cpu=4), cohort="c")]
    )
    fleet = [worker("w1", cpu=4, reserved={"cpu": 4}, cpu_available=0, active=1)]
    borrowed = Shape(ResourceRequest(cpu=4), tenant="web")
    accounts.charge("web", tuple(n * 2 for n in borrowed.demand))  # web uses 8 of its 4: borrowing
    running = [Running("b1", borrowed, "w1", seq=1)]
    one = Shape(ResourceRequest(cpu=4), tenant="ml")
    assert plan_preemption(accounts, "single", one, fleet, running) is not None
    assert plan_preemption(accounts, "gang", gang_shape(2, cpu=2, tenant="ml"), fleet, running) is None


# ---- with main's placement policies and prefetch ---------------------------------------------------


@pytest.mark.parametrize("index", [False, True], ids=["list", "index"])
def test_binpack_puts_a_gangs_members_on_the_fullest_workers_that_fit(index):
    # Two busy workers (1 core free each: room for a member) and two idle ones.
    fleet = [
        worker("busy1", cpu=4, reserved={"cpu": 3}),
        worker("busy2", cpu=4, reserved={"cpu": 3}),
        worker("idle1", cpu=4),
        worker("idle2", cpu=4),
    ]
    queue = PendingQueue()
    queue.add("g", gang_shape(2, cpu=1), 0)
    workers = _index(fleet) if index else fleet
    (spread,) = schedule(queue, workers)
    assert {m[0] for m in spread.members} == {"idle1", "idle2"}  # least loaded first (the default)
    workers = _index(fleet) if index else fleet
    (packed,) = schedule(queue, workers, placement="binpack")
    assert {m[0] for m in packed.members} == {"busy1", "busy2"}  # the fullest that fit: idle ones stay idle


def test_a_binpack_gang_with_no_room_for_every_member_takes_nothing_and_the_rest_still_packs():
    fleet = [worker("a", cpu=4, reserved={"cpu": 3}), worker("b", cpu=4)]
    queue = PendingQueue()
    queue.add("g", gang_shape(3, cpu=1), 0)
    queue.add("one", Shape(ResourceRequest(cpu=1)), 1)
    placements = schedule(queue, fleet, placement="binpack")
    assert [(p.execution_id, p.worker, p.members) for p in placements] == [("one", "a", ())]


def test_a_gang_is_never_queued_ahead_and_a_worker_with_a_queue_is_no_member():
    from flux.matching.prefetch import QueueSpace, never_queued, queue_ahead

    shp = gang_shape(2, cpu=1)
    assert never_queued(shp)
    queue = PendingQueue()
    queue.add("g", shp, 0)
    busy = [worker("a", cpu=4, reserved={"cpu": 4}), worker("b", cpu=4, reserved={"cpu": 4})]
    assert queue_ahead(queue, [QueueSpace(view, 4) for view in busy]) == []
    # Room on both, but "b" holds executions in its own queue: those go first, nothing is placed there.
    fleet = [worker("a"), worker("b", queued=1), worker("c")]
    (placement,) = schedule(queue, fleet)
    assert {m[0] for m in placement.members} == {"a", "c"}
    assert schedule(queue, [worker("a"), worker("b", queued=1)]) == []


def test_the_queue_keeps_its_gang_shapes_as_work_comes_and_goes() -> None:
    # A pass scoped to a few workers reads these instead of walking every shape.
    queue = PendingQueue()
    plain, gang = Shape(ResourceRequest(cpu=1)), Shape(ResourceRequest(cpu=1), gang=Gang(2))
    queue.add("p", plain, 1)
    assert queue.gang_shapes() == []
    queue.add("g1", gang, 2)
    queue.add("g2", gang, 3)
    assert queue.gang_shapes() == [gang]
    queue.remove("g1")
    assert queue.gang_shapes() == [gang]
    queue.remove("g2")
    assert queue.gang_shapes() == []
