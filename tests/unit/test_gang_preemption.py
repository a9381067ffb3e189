"""Reclaim for a pending gang (flux.matching.gang_preemption): room on every member's worker at
once, or no victim at all.

Table tests pin the rule; hypothesis properties over random fleets, borrowed work (single runs and
running gangs) and gangs (size, cores, ``same``, ``spread``) check that a plan is only ever made
when, with all its victims gone, every member fits a distinct worker of its topology and the gang
fits its tenant's quota; that every victim is borrowed work of another tenant of its cohort and is
needed; that the real matcher then places the gang whole; and that a gang that fits already
plans nothing.
"""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from flux.domain.gang import Gang
from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import Limits, Tenant
from flux.matching import Accounts, Ledger, PendingQueue, Shape, capacity_of, schedule
from flux.matching.aging import BookedRoom
from flux.matching.filters import fits_now
from flux.matching.preemption import Running, plan
from tests.unit.fleet import worker

SETTINGS = settings(max_examples=200, deadline=None)


def cores(n: int, tenant: str, size: int = 0, same: str | None = None, spread: str | None = None) -> Shape:
    gang = Gang(size, same, spread) if size else None
    return Shape(ResourceRequest(cpu=n), tenant=tenant, gang=gang)


class Fleet:
    """Workers of 4 cores with executions on them (a running gang: one per member), and accounts."""

    def __init__(self, nominal: dict[str, int], workers: dict[str, dict[str, str]]):
        self.accounts = Accounts([Tenant(name, Limits(cpu=n), "c") for name, n in nominal.items()])
        self.labels = workers
        self.running: list[Running] = []
        self.accounts.capacity = capacity_of(v.resources for v in self.views())

    def start(self, execution_id: str, shape: Shape, workers: list[str], priority: int = 0, seq: int = 0):
        for name in workers:
            self.running.append(Running(execution_id, shape, name, (), priority, seq))
        self.accounts.charge(shape.tenant, shape.demand)

    def views(self, without: set[str] = frozenset()):  # type: ignore[assignment]
        out = []
        for name, labels in sorted(self.labels.items()):
            held = [r for r in self.running if r.worker == name and r.execution_id not in without]
            used = sum(r.shape.requests.cpu for r in held)
            out.append(worker(name, cpu=4, labels=labels, active=len(held), reserved={"cpu": used}))
        return out

    def plan(self, shape: Shape, execution_id: str = "g"):
        return plan(self.accounts, execution_id, shape, self.views(), self.running)


def _fits_whole(fleet: Fleet, shape: Shape, gone: set[str]) -> list[tuple[str, ...]]:
    """Every set of ``size`` workers (brute force) where the gang fits with ``gone`` stopped."""
    gang = shape.gang
    assert gang is not None
    fitting = [v for v in fleet.views(gone) if fits_now(shape, BookedRoom(v))]
    found = []
    for chosen in combinations(fitting, gang.size):
        if gang.same and (
            any(gang.same not in v.labels for v in chosen) or len({v.labels[gang.same] for v in chosen}) != 1
        ):
            continue
        if gang.spread and (
            any(gang.spread not in v.labels for v in chosen)
            or len({v.labels[gang.spread] for v in chosen}) != gang.size
        ):
            continue
        found.append(tuple(v.name for v in chosen))
    return found


def _quota_fits(fleet: Fleet, shape: Shape, gone: set[str]) -> bool:
    after = fleet.accounts.copy()
    for execution_id in gone:
        victim = next(r for r in fleet.running if r.execution_id == execution_id)
        after.refund(victim.tenant, victim.shape.demand)
    return Ledger(after).fits(shape.tenant, shape.demand)


# ---- the rule ----------------------------------------------------------------------------------


RACKS = {"a": {"rack": "r1"}, "b": {"rack": "r1"}, "c": {"rack": "r2"}, "d": {"rack": "r2"}}


def test_a_gang_preempts_borrowed_work_on_as_many_workers_as_it_has_members():
    fleet = Fleet({"ml": 8, "web": 8}, RACKS)
    for seq, name in enumerate("abcd"):
        fleet.start(f"web-{name}", cores(4, "web"), [name], seq=seq)  # web: 16 of its 8
    found = fleet.plan(cores(4, "ml", size=2))
    assert found is not None
    assert len(found.victims) == 2 and len(found.members) == 2
    assert {v.worker for v in found.victims} == set(found.members)  # room freed where members go
    assert found.worker == found.members[0]
    assert found.describe() == "will preempt 2 executions of tenant web"


def test_the_newest_lowest_priority_victims_go_first():
    fleet = Fleet({"ml": 8, "web": 8}, RACKS)
    fleet.start("web-a", cores(4, "web"), ["a"], priority=0, seq=1)
    fleet.start("web-b", cores(4, "web"), ["b"], priority=5, seq=2)
    fleet.start("web-c", cores(4, "web"), ["c"], priority=0, seq=3)
    fleet.start("web-d", cores(4, "web"), ["d"], priority=0, seq=4)
    found = fleet.plan(cores(4, "ml", size=2))
    assert found is not None and sorted(v.execution_id for v in found.victims) == ["web-c", "web-d"]


def test_no_victim_for_a_gang_that_would_still_not_fit():
    # Three workers of four can be freed (d runs ml's own work, never a victim): a gang of four
    # would still miss one, so nothing is preempted for it; a gang of three gets all three.
    fleet = Fleet({"ml": 16, "web": 0}, RACKS)
    for name in "abc":
        fleet.start(f"web-{name}", cores(4, "web"), [name])
    fleet.start("ml-d", cores(4, "ml"), ["d"])
    assert fleet.plan(cores(4, "ml", size=4)) is None
    found = fleet.plan(cores(4, "ml", size=3))
    assert found is not None and set(found.members) == {"a", "b", "c"}


def test_same_rack_frees_one_rack_whole():
    fleet = Fleet({"ml": 8, "web": 8}, RACKS)  # web borrows 4: one victim gives the quota back
    fleet.start("web-a", cores(4, "web"), ["a"], seq=1)
    fleet.start("web-c", cores(4, "web"), ["c"], seq=2)
    fleet.start("web-d", cores(4, "web"), ["d"], seq=3)
    # b is free: rack r1 needs one victim (a), rack r2 two; r1 is the plan.
    found = fleet.plan(cores(4, "ml", size=2, same="rack"))
    assert found is not None
    assert set(found.members) == {"a", "b"} and [v.execution_id for v in found.victims] == ["web-a"]


def test_a_running_gang_is_one_victim_and_frees_every_member():
    fleet = Fleet({"ml": 8, "web": 8}, RACKS)  # web borrows 8: its gang's, or both of rack r2
    fleet.start("web-gang", cores(4, "web", size=2), ["a", "b"], seq=1)
    fleet.start("web-c", cores(4, "web"), ["c"], seq=2)
    fleet.start("web-d", cores(4, "web"), ["d"], seq=3)
    found = fleet.plan(cores(4, "ml", size=2, same="rack"))
    assert found is not None
    assert set(found.members) == {"a", "b"} and [v.execution_id for v in found.victims] == ["web-gang"]
    assert found.describe() == "will preempt 1 execution of tenant web"


def test_a_gang_that_fits_now_plans_nothing():
    fleet = Fleet({"ml": 8, "web": 8}, RACKS)
    fleet.start("web-a", cores(4, "web"), ["a"])
    assert fleet.plan(cores(4, "ml", size=2)) is None  # b, c, d are free


def test_victims_anywhere_give_the_quota_back_when_the_room_is_free():
    # web lends nothing (nominal 0 of a cohort of 8) yet uses 4: ml's gang of 8 cores has free
    # workers, but its quota needs web's borrowed 4 back, as a single run's would.
    fleet = Fleet({"ml": 8, "web": 0}, RACKS)
    fleet.start("web-a", cores(4, "web"), ["a"])
    found = fleet.plan(cores(4, "ml", size=2))
    assert found is not None and [v.execution_id for v in found.victims] == ["web-a"]
    assert "a" not in found.members


def test_a_gang_beyond_its_nominal_quota_reclaims_nothing():
    fleet = Fleet({"ml": 4, "web": 4}, RACKS)
    for name in "abcd":
        fleet.start(f"web-{name}", cores(4, "web"), [name])
    assert fleet.plan(cores(4, "ml", size=2)) is None  # 8 cores against a nominal of 4


# ---- properties ------------------------------------------------------------------------------


@st.composite
def scenarios(draw):
    names = "abcdef"[: draw(st.integers(2, 6))]
    labels = {
        n: {
            **({"rack": draw(st.sampled_from(["r1", "r2"]))} if draw(st.integers(0, 4)) else {}),
            "zone": draw(st.sampled_from(["z1", "z2", "z3"])),
        }
        for n in names
    }
    tenants = {"ml": draw(st.integers(0, 24)), "web": draw(st.integers(0, 8)), "ops": draw(st.integers(0, 4))}
    fleet = Fleet(tenants, labels)
    free = dict.fromkeys(names, 4)
    for seq in range(draw(st.integers(0, 12))):
        tenant = draw(st.sampled_from(["web", "web", "ops", "ml"]))
        cpu = draw(st.integers(1, 4))
        size = draw(st.sampled_from([0, 0, 0, 2]))
        room = [n for n in names if free[n] >= cpu]
        if len(room) < max(size, 1):
            continue
        workers = draw(
            st.lists(st.sampled_from(room), min_size=max(size, 1), max_size=max(size, 1), unique=True)
        )
        for n in workers:
            free[n] -= cpu
        fleet.start(f"{tenant}-{seq}", cores(cpu, tenant, size), workers, draw(st.integers(0, 3)), seq)
    size = draw(st.integers(2, 4))
    same = draw(st.sampled_from([None, "rack"]))
    spread = draw(st.sampled_from([None, None, "zone"]))
    return fleet, cores(draw(st.integers(1, 4)), "ml", size, same, spread)


@SETTINGS
@given(scenarios())
def test_a_plan_makes_room_for_the_whole_gang_or_there_is_none(scenario):
    fleet, shape = scenario
    found = fleet.plan(shape)
    if found is None:
        return
    gone = {v.execution_id for v in found.victims}
    assert len(gone) == len(found.victims)  # one victim per execution, a gang's members and all
    assert found.victims and len(set(found.members)) == shape.gang.size
    # With every victim gone the whole gang fits on its members, and its tenant's quota.
    assert tuple(sorted(found.members)) in _fits_whole(fleet, shape, gone)
    assert _quota_fits(fleet, shape, gone)
    # And the real matcher places it then, whole, with the victims' usage refunded.
    after = fleet.accounts.copy()
    for execution_id in gone:
        victim = next(r for r in fleet.running if r.execution_id == execution_id)
        after.refund(victim.tenant, victim.shape.demand)
    queue = PendingQueue()
    queue.add("g", shape, 1)
    (placed,) = schedule(queue, fleet.views(gone), accounts=after)
    assert len({w for w, _ in placed.members}) == shape.gang.size
    # Every victim was borrowed work of another tenant of the cohort, and is needed.
    before = fleet.accounts
    for victim in found.victims:
        assert victim.tenant != "ml"
        nominal = before.terms[victim.tenant].nominal
        assert any(n is not None and before.used(victim.tenant)[i] > n for i, n in enumerate(nominal))
        rest = gone - {victim.execution_id}
        assert tuple(sorted(found.members)) not in _fits_whole(fleet, shape, rest) or not _quota_fits(
            fleet, shape, rest
        )


@SETTINGS
@given(scenarios())
def test_a_gang_that_fits_now_never_preempts(scenario):
    fleet, shape = scenario
    if _fits_whole(fleet, shape, set()) and _quota_fits(fleet, shape, set()):
        assert fleet.plan(shape) is None
