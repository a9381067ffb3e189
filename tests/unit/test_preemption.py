"""Reclaim planning (flux.matching.preemption): who is preempted so a tenant gets its quota back.

Table tests pin the rule; properties check, over fleets filled through the
real ``schedule``, that a plan always makes room, that every victim is needed
and was borrowed, and that a returning tenant gets its nominal quota back
after one round of preemptions (one grace period).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import Limits, Tenant
from flux.matching import Accounts, Ledger, PendingQueue, Shape, capacity_of, schedule
from flux.matching.aging import BookedRoom
from flux.matching.filters import fits_now
from flux.matching.preemption import Preemption, Running, plan
from tests.unit.fleet import worker

SETTINGS = settings(max_examples=100, deadline=None)


def gpus(n: int, name: str) -> Shape:
    return Shape(ResourceRequest(gpu=n), tenant=name)


def cohort(**nominal: int) -> Accounts:
    return Accounts([Tenant(name, Limits(gpu=n), "research") for name, n in nominal.items()])


class Fleet:
    """Workers with executions on them, kept consistent with an ``Accounts``."""

    def __init__(self, accounts: Accounts, workers: dict[str, int]):
        self.accounts = accounts
        self.gpus = workers
        self.running: dict[str, Running] = {}
        accounts.capacity = capacity_of(v.resources for v in self.views())

    def views(self):
        out = []
        for name, count in sorted(self.gpus.items()):
            held = [r for r in self.running.values() if r.worker == name]
            out.append(
                worker(
                    name,
                    cpu=64,
                    gpus=count,
                    capacity=64,
                    active=len(held),
                    held_gpus={i for r in held for i in r.gpu_indices},
                )
            )
        return out

    def start(self, execution_id: str, shape: Shape, worker_name: str, gpu_indices, priority=0, seq=0):
        self.running[execution_id] = Running(
            execution_id, shape, worker_name, tuple(gpu_indices), priority, seq
        )
        self.accounts.charge(shape.tenant, shape.demand)

    def stop(self, execution_id: str) -> Running:
        victim = self.running.pop(execution_id)
        self.accounts.refund(victim.tenant, victim.shape.demand)
        return victim


def filled_by(fleet: Fleet, name: str, count: int, priority=0):
    """``count`` one-GPU executions of ``name`` placed by the real scheduler."""
    queue = PendingQueue()
    for seq in range(count):
        queue.add(f"{name}-{seq}", gpus(1, name), seq, priority)
    for p in schedule(queue, fleet.views(), accounts=fleet.accounts):
        item = queue.get(p.execution_id)
        fleet.start(p.execution_id, p.shape, p.worker, p.gpu_indices, item.priority, item.seq)


# ---- the rule ----------------------------------------------------------------------------------


def test_reclaims_the_newest_borrowed_executions_on_one_worker():
    fleet = Fleet(cohort(ml=4, web=4), {"w1": 4, "w2": 4})
    filled_by(fleet, "web", 8)  # web borrowed ml's 4 GPUs
    found = plan(fleet.accounts, "ml-0", gpus(2, "ml"), fleet.views(), fleet.running.values())
    assert found is not None
    assert len(found.victims) == 2
    assert {v.worker for v in found.victims} == {found.worker}
    # Newest first: the two with the highest submission numbers on that worker.
    on_worker = sorted((r for r in fleet.running.values() if r.worker == found.worker), key=lambda r: -r.seq)
    assert [v.execution_id for v in found.victims] == [r.execution_id for r in on_worker[:2]]
    assert found.describe() == "will preempt 2 executions of tenant web"


def test_lowest_priority_goes_before_newest():
    fleet = Fleet(cohort(ml=1, web=1), {"w": 2})
    fleet.start("web-important", gpus(1, "web"), "w", [0], priority=5, seq=9)
    fleet.start("web-cheap", gpus(1, "web"), "w", [1], priority=0, seq=1)
    found = plan(fleet.accounts, "ml-0", gpus(1, "ml"), fleet.views(), fleet.running.values())
    assert found is not None and [v.execution_id for v in found.victims] == ["web-cheap"]


def test_no_reclaim_beyond_nominal():
    fleet = Fleet(cohort(ml=2, web=2), {"w": 4})
    filled_by(fleet, "web", 4)
    # ml asks for 3 with a nominal of 2: that would be borrowing, not reclaiming.
    assert plan(fleet.accounts, "ml-0", gpus(3, "ml"), fleet.views(), fleet.running.values()) is None


def test_no_preemption_when_it_fits_already():
    fleet = Fleet(cohort(ml=2, web=2), {"w": 4})
    filled_by(fleet, "web", 2)
    assert plan(fleet.accounts, "ml-0", gpus(2, "ml"), fleet.views(), fleet.running.values()) is None


def test_a_tenant_within_its_nominal_is_never_a_victim():
    # web uses exactly its nominal: ml cannot fit (the fleet is full) but has nothing to reclaim.
    fleet = Fleet(cohort(ml=2, web=4), {"w": 4})
    filled_by(fleet, "web", 4)
    assert plan(fleet.accounts, "ml-0", gpus(1, "ml"), fleet.views(), fleet.running.values()) is None


def test_outside_the_cohort_is_never_a_victim():
    accounts = Accounts(
        [
            Tenant("ml", Limits(gpu=2), "research"),
            Tenant("web", Limits(gpu=0), "retail"),
            Tenant("r", Limits(gpu=2), "research"),
        ]
    )
    fleet = Fleet(accounts, {"w": 2})
    fleet.start("web-0", gpus(1, "web"), "w", [0])  # over its quota, but in another cohort
    fleet.start("web-1", gpus(1, "web"), "w", [1])
    assert plan(accounts, "ml-0", gpus(1, "ml"), fleet.views(), fleet.running.values()) is None


def test_a_victim_that_frees_nothing_is_not_taken():
    # The web execution on w2 holds a GPU ml does not need room on: ml fits w1 once w1's is gone.
    fleet = Fleet(cohort(ml=3, web=0), {"w1": 2, "w2": 1})
    fleet.start("web-w1", gpus(2, "web"), "w1", [0, 1], seq=1)
    fleet.start("web-w2", gpus(1, "web"), "w2", [0], seq=2)
    found = plan(fleet.accounts, "ml-0", gpus(2, "ml"), fleet.views(), fleet.running.values())
    assert found == Preemption("ml-0", "w1", (fleet.running["web-w1"],))


# ---- properties ---------------------------------------------------------------------------------


@st.composite
def cohorts(draw):
    names = ["a", "b", "c"]
    nominal = {n: draw(st.integers(0, 6)) for n in names}
    workers = {f"w{i}": draw(st.integers(1, 4)) for i in range(draw(st.integers(1, 4)))}
    return nominal, workers


@SETTINGS
@given(setup=cohorts(), seed=st.integers(0, 2**32 - 1))
def test_a_plan_always_makes_room_and_every_victim_is_needed(setup, seed):
    nominal, workers = setup
    rng = random.Random(seed)
    fleet = Fleet(cohort(**nominal), workers)
    for name in rng.sample(list(nominal), k=2):
        filled_by(fleet, name, rng.randint(0, 12), priority=rng.randint(0, 2))
    who = rng.choice(list(nominal))
    shape = gpus(rng.randint(1, 3), who)
    found = plan(fleet.accounts, "new", shape, fleet.views(), fleet.running.values())
    if found is None:
        return
    views = {v.name: v for v in fleet.views()}
    for victim in found.victims:
        assert victim.tenant != who
        used = fleet.accounts.used(victim.tenant)[2]
        assert used > nominal[victim.tenant], "only borrowed work is reclaimed"

    def fits_without(victims):
        accounts = Accounts(fleet.accounts.tenant(n) for n in nominal)
        for name in nominal:
            accounts.charge(name, fleet.accounts.used(name))
        for v in victims:
            accounts.refund(v.tenant, v.shape.demand)
        held = {
            i
            for r in fleet.running.values()
            if r.worker == found.worker and r not in victims
            for i in r.gpu_indices
        }
        view = worker(found.worker, cpu=64, gpus=workers[found.worker], capacity=64, held_gpus=held)
        return Ledger(accounts).fits(who, shape.demand) and fits_now(shape, BookedRoom(view))

    assert views[found.worker] is not None
    assert fits_without(found.victims), "the plan makes room"
    for victim in found.victims:
        assert not fits_without([v for v in found.victims if v is not victim]), "every victim is needed"


@SETTINGS
@given(
    nominal=st.integers(1, 6),
    workers=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    priority=st.integers(0, 1),
)
def test_a_returning_tenant_gets_its_quota_back_after_one_round(nominal, workers, priority):
    """ml was idle and web borrowed all of ml's quota; ml submits its nominal worth of 1-GPU work.
    Every plan of one round is decided before any victim ends (they stop within one grace);
    as the victims end, the real scheduler places ml's work, up to its whole nominal quota."""
    total = sum(workers)
    nominal = min(nominal, total)
    accounts = Accounts(
        [
            Tenant("ml", Limits(gpu=nominal), "research"),
            Tenant("web", Limits(gpu=total - nominal), "research"),
        ]
    )
    fleet = Fleet(accounts, {f"w{i}": n for i, n in enumerate(workers)})
    filled_by(fleet, "web", total, priority=priority)
    assert accounts.used("web")[2] == total  # the whole fleet, ml's quota included
    plans = []
    for seq in range(nominal):
        found = plan(accounts, f"ml-{seq}", gpus(1, "ml"), fleet.views(), fleet.running.values())
        assert found is not None and len(found.victims) == 1
        plans.append(found)
        # Counted as ml's from the decision on, so the next plan reclaims another GPU.
        fleet.start(f"ml-{seq}", gpus(1, "ml"), found.worker, found.victims[0].gpu_indices)
        fleet.stop(found.victims[0].execution_id)
    assert len({v.execution_id for p in plans for v in p.victims}) == nominal  # no victim twice
    for seq in range(nominal):
        fleet.stop(f"ml-{seq}")
    queue = PendingQueue()
    for seq in range(nominal):
        queue.add(f"ml-{seq}", gpus(1, "ml"), 1000 + seq)
    placed = schedule(queue, fleet.views(), accounts=accounts)
    assert len(placed) == nominal


# ---- execution slots: request-less work is reclaimed too ------------------------------------

NOTHING = ResourceRequest()


def slots_fleet(solo: dict, ml: dict, solo_running: int, solo_cpu: int = 0) -> tuple[Accounts, list, list]:
    """One worker with 8 cores and 8 slots; solo runs ``solo_running`` request-less executions
    (and ``solo_cpu`` of cpu=1)."""
    accounts = Accounts([Tenant("solo", Limits(**solo), "team"), Tenant("ml", Limits(**ml), "team")])
    running = []
    for seq in range(solo_running + solo_cpu):
        requests = ResourceRequest(cpu=1) if seq >= solo_running else NOTHING
        shape = Shape(requests, tenant="solo")
        running.append(Running(f"solo-{seq}", shape, "w", (), 0, seq))
        accounts.charge("solo", shape.demand)
    view = worker("w", cpu=8, capacity=8, active=len(running), reserved={"cpu": solo_cpu})
    accounts.capacity = capacity_of([view.resources], 8)
    return accounts, [view], running


SLOT_RECLAIM = [
    # (id, solo's quota, ml's quota, solo request-less, solo cpu=1, ml asks, victims or None)
    (
        "slots full of borrowed request-less work: one goes",
        {"cpu": 1, "executions": 1},
        {"cpu": 2, "executions": 7},
        7,
        1,
        ResourceRequest(cpu=1),
        ["solo-7"],  # the newest (its cpu=1 one)
    ),
    (
        "ml asks nothing: a slot is all it needs",
        {"executions": 1},
        {"executions": 7},
        8,
        0,
        NOTHING,
        ["solo-7"],
    ),
    (
        "solo within its executions quota is no victim",
        {"executions": 8},
        {"executions": 2},
        8,
        0,
        NOTHING,
        None,
    ),
    (
        "ml at its own executions quota reclaims nothing",
        {"executions": 8},
        {"executions": 0},
        8,
        0,
        NOTHING,
        None,
    ),
    (
        "a free slot: placing is the scheduler's job",
        {"executions": 1},
        {"executions": 7},
        7,
        0,
        NOTHING,
        None,
    ),
]


@pytest.mark.parametrize(
    ("solo", "ml", "request_less", "cpu_ones", "asked", "victims"),
    [c[1:] for c in SLOT_RECLAIM],
    ids=[c[0] for c in SLOT_RECLAIM],
)
def test_reclaim_of_execution_slots(solo, ml, request_less, cpu_ones, asked, victims):
    accounts, views, running = slots_fleet(solo, ml, request_less, cpu_ones)
    found = plan(accounts, "ml-0", Shape(asked, tenant="ml"), views, running)
    assert (None if found is None else [v.execution_id for v in found.victims]) == victims
    if found is not None:
        assert found.describe() == "will preempt 1 execution of tenant solo"
