"""Tenants in the pure matcher: quotas, cohort borrowing and lending, DRF fair share.

Table tests pin each boundary of the quota rules (``flux.matching.tenancy``);
the placement tests go through the real ``schedule``; the golden test is the
fair-sharing example of Kubernetes Kueue's KEP-1714 (story 3). Properties over
random fleets live in test_tenancy_properties.py.
"""

from __future__ import annotations

import pytest

from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import Limits, Tenant
from flux.matching import Accounts, Ledger, PendingQueue, Shape, capacity_of, demand, explain, schedule
from flux.matching.index import FleetIndex
from flux.matching.tenancy import admit
from tests.unit.fleet import GiB, worker


def tenant(name, cohort="", borrow=None, lend=None, weight=1.0, **quota):
    return Tenant(
        name,
        Limits(**quota),
        cohort,
        Limits(**(borrow or {})),
        Limits(**(lend or {})),
        weight,
    )


def gpus(n: int, tenant_name: str) -> Shape:
    return Shape(ResourceRequest(gpu=n), tenant=tenant_name)


def by_tenant(placements) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in placements:
        counts[p.shape.tenant] = counts.get(p.shape.tenant, 0) + p.shape.requests.gpu
    return counts


# ---- the quota rule, one boundary per row -----------------------------------------------------

CASES = [
    # (id, tenants, usage before, who asks, gpus asked, fits, reason shown)
    ("no quota: anything", [tenant("a")], {}, "a", 100, True, None),
    ("unknown tenant: unlimited", [tenant("a", gpu=1)], {}, "zz", 100, True, None),
    ("exact fit of nominal", [tenant("a", gpu=4)], {"a": 3}, "a", 1, True, None),
    (
        "one over nominal, no cohort",
        [tenant("a", gpu=4)],
        {"a": 4},
        "a",
        1,
        False,
        "tenant a at its gpu quota 4/4",
    ),
    (
        "borrows what the cohort leaves",
        [tenant("a", "c", gpu=4), tenant("b", "c", gpu=4)],
        {"a": 4},
        "a",
        4,
        True,
        None,
    ),
    (
        "cohort pool exhausted",
        [tenant("a", "c", gpu=4), tenant("b", "c", gpu=4)],
        {"a": 6, "b": 2},
        "a",
        1,
        False,
        "tenant a at its gpu quota 6/4, borrowing 2 of no limit in cohort c (the cohort has no gpu left to lend)",
    ),
    (
        "borrowing limit reached",
        [tenant("ml", "research", {"gpu": 2}, gpu=4), tenant("b", "research", gpu=8)],
        {"ml": 6},
        "ml",
        1,
        False,
        "tenant ml at its gpu quota 6/4, borrowing 2 of 2 in cohort research",
    ),
    (
        "borrowing limit exact",
        [tenant("ml", "research", {"gpu": 2}, gpu=4), tenant("b", "research", gpu=8)],
        {"ml": 5},
        "ml",
        1,
        True,
        None,
    ),
    (
        "lender keeps its guaranteed part",
        [tenant("a", "c", gpu=4), tenant("b", "c", lend={"gpu": 1}, gpu=4)],
        {"a": 5},
        "a",
        1,
        False,
        "tenant a at its gpu quota 5/4, borrowing 1 of no limit in cohort c (the cohort has no gpu left to lend)",
    ),
    (
        "lender uses its guaranteed part although others borrowed all lendable",
        [tenant("a", "c", gpu=4), tenant("b", "c", lend={"gpu": 1}, gpu=4)],
        {"a": 5},
        "b",
        3,
        True,
        None,
    ),
    (
        "below nominal but others borrowed it (needs reclaim)",
        [tenant("a", "c", gpu=4), tenant("b", "c", gpu=4)],
        {"a": 7},
        "b",
        2,
        False,
        "tenant b using 0/4 of its gpu quota, borrowing 0 of no limit in cohort c (the cohort has no gpu left to lend)",
    ),
    ("unrequested resource not checked", [tenant("a", gpu=0, cpu=2)], {"a": 0}, "a", 0, True, None),
]


@pytest.mark.parametrize(
    ("tenants", "usage", "who", "asked", "fits", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_quota_rule(tenants, usage, who, asked, fits, reason):
    accounts = Accounts(tenants, capacity=(0, 0, 100, 0, 0))
    for name, used in usage.items():
        accounts.charge(name, (0, 0, used, 0, 0))
    block = Ledger(accounts).blocked(who, (1, 0, asked, 0, 0))
    assert (block is None) == fits
    if reason is not None:
        assert block is not None and block.describe() == reason


def test_refund_returns_the_cohort_pool():
    accounts = Accounts([tenant("a", "c", gpu=2), tenant("b", "c", gpu=2)])
    accounts.charge("a", (0, 0, 4, 0, 0))
    assert not Ledger(accounts).fits("b", (0, 0, 1, 0, 0))
    accounts.refund("a", (0, 0, 1, 0, 0))
    assert Ledger(accounts).fits("b", (0, 0, 1, 0, 0))
    assert accounts.drawn["c"][2] == 3


def test_configure_keeps_usage_and_recounts_the_pool():
    accounts = Accounts([tenant("a", "c", gpu=2), tenant("b", "c", gpu=2)])
    accounts.charge("a", (0, 0, 3, 0, 0))
    accounts.configure([tenant("a", "c", gpu=2), tenant("b", "c", gpu=6)])
    assert accounts.pool["c"][2] == 8 and accounts.drawn["c"][2] == 3
    assert Ledger(accounts).fits("a", (0, 0, 5, 0, 0))
    assert not Ledger(accounts).fits("a", (0, 0, 6, 0, 0))


def test_demand_counts_vram_per_gpu():
    assert demand(ResourceRequest(cpu=2, memory="1Gi", gpu=2, gpu_memory="10Gi")) == (2, GiB, 2, 20 * GiB, 1)
    assert Shape(ResourceRequest(gpu=2, gpu_memory="10Gi")).demand == (0, 0, 2, 20 * GiB, 1)


def test_share_is_above_nominal_over_capacity_divided_by_weight():
    accounts = Accounts([tenant("a", gpu=2, weight=2), tenant("b")], capacity=(10, 0, 8, 0, 0))
    assert accounts.share("a", (0, 0, 2, 0, 0)) == 0.0  # within nominal
    assert accounts.share("a", (0, 0, 6, 0, 0)) == (4 / 8) / 2
    # Dominant resource: cpu 5/10 beats gpu 2/8.
    assert accounts.share("b", (5, 0, 2, 0, 0)) == 0.5


# ---- through schedule -----------------------------------------------------------------------


def test_burst_in_one_pass_never_exceeds_quota():
    queue = PendingQueue()
    for seq in range(10):
        queue.add(f"e{seq}", gpus(1, "ml"), seq)
    accounts = Accounts([tenant("ml", gpu=3)], capacity=(0, 0, 16, 0, 0))
    placements = schedule(queue, [worker("w", gpus=16)], accounts=accounts)
    assert len(placements) == 3


def test_quota_blocked_tenant_does_not_block_another():
    queue = PendingQueue()
    queue.add("a0", gpus(1, "a"), 0)
    queue.add("a1", gpus(1, "a"), 1)
    queue.add("b2", gpus(1, "b"), 2)
    accounts = Accounts([tenant("a", gpu=1)], capacity=(0, 0, 4, 0, 0))
    placements = schedule(queue, [worker("w", gpus=4)], accounts=accounts)
    assert sorted(p.execution_id for p in placements) == ["a0", "b2"]


def test_quota_blocked_head_does_not_block_a_smaller_shape_of_the_same_tenant():
    queue = PendingQueue()
    queue.add("big", gpus(3, "a"), 0)
    queue.add("small", gpus(1, "a"), 1)
    accounts = Accounts([tenant("a", gpu=2)], capacity=(0, 0, 4, 0, 0))
    placements = schedule(queue, [worker("w", gpus=4)], accounts=accounts)
    assert [p.execution_id for p in placements] == ["small"]


def test_lowest_share_goes_first_then_priority_within_a_tenant():
    queue = PendingQueue()
    # Tenant a holds 2 of 4 GPUs already; b holds none: b's work goes first although younger.
    queue.add("a-old", gpus(1, "a"), 0)
    queue.add("b-low", gpus(1, "b"), 1, priority=0)
    queue.add("b-high", gpus(1, "b"), 2, priority=5)
    accounts = Accounts([], capacity=(0, 0, 4, 0, 0))
    accounts.charge("a", (0, 0, 2, 0, 0))
    placements = schedule(queue, [worker("w", gpus=4)], accounts=accounts, limit=2)
    assert [p.execution_id for p in placements] == ["b-high", "b-low"]


def test_single_tenant_without_quota_places_exactly_as_without_tenants():
    queue_a, queue_b = PendingQueue(), PendingQueue()
    shapes = [Shape(ResourceRequest(cpu=c)) for c in (1, 2, 3)]
    for seq in range(30):
        for queue in (queue_a, queue_b):
            queue.add(f"e{seq}", shapes[seq % 3], seq, priority=seq % 4)
    fleet = [worker(f"w{i}", cpu=8) for i in range(4)]
    plain = schedule(queue_a, fleet)
    with_accounts = schedule(
        queue_b, fleet, accounts=Accounts(capacity=capacity_of(w.resources for w in fleet))
    )
    assert [(p.execution_id, p.worker) for p in plain] == [(p.execution_id, p.worker) for p in with_accounts]


def test_fleet_index_gives_the_same_answer_with_tenants():
    fleet = [worker(f"w{i}", cpu=4, gpus=2) for i in range(5)]
    index = FleetIndex()
    for view in fleet:
        index.put(view)
    tenants = [tenant("a", "c", gpu=3), tenant("b", "c", gpu=3, weight=2), tenant("d", cpu=6)]

    def run(workers):
        queue = PendingQueue()
        for seq in range(40):
            who = "abd"[seq % 3]
            queue.add(f"e{seq}", Shape(ResourceRequest(cpu=1, gpu=seq % 2), tenant=who), seq)
        accounts = Accounts(tenants, capacity=capacity_of(w.resources for w in fleet))
        return [(p.execution_id, p.worker) for p in schedule(queue, workers, accounts=accounts)]

    assert run(index) == run(fleet)


# ---- Kueue KEP-1714, story 3 ----------------------------------------------------------------


def test_kueue_fair_sharing_golden():
    """Cohorts C1 and C2 get 150 GPUs each; in C1, queues 1A/1B/1C weigh 1/1/3 and want 90 each.

    In Kueue the 150 come from a parent cohort; Flux's cohorts are flat, so each cohort's
    150 are lent by a member that runs nothing. Expected (KEP-1714): 1A 30, 1B 30, 1C 90, 2A 150.
    """
    tenants = [
        tenant("c1-pool", "c1", gpu=150),
        tenant("1a", "c1", gpu=0, weight=1),
        tenant("1b", "c1", gpu=0, weight=1),
        tenant("1c", "c1", gpu=0, weight=3),
        tenant("c2-pool", "c2", gpu=150),
        tenant("2a", "c2", gpu=0, weight=1),
    ]
    # 320 GPUs: more than both cohorts lend, so the quotas decide, not the fleet.
    fleet = [worker(f"w{i:02d}", cpu=64, gpus=8, capacity=64) for i in range(40)]
    queue = PendingQueue()
    seq = 0
    for _ in range(200):  # submissions interleaved, as teams submit side by side
        for name in ("1a", "1b", "1c", "2a"):
            if name != "2a" and seq // 4 >= 90:
                seq += 1
                continue
            queue.add(f"{name}-{seq}", gpus(1, name), seq)
            seq += 1
    accounts = Accounts(tenants, capacity=capacity_of(w.resources for w in fleet))
    placements = schedule(queue, fleet, accounts=accounts)
    assert by_tenant(placements) == {"1a": 30, "1b": 30, "1c": 90, "2a": 150}


def test_kueue_golden_holds_when_work_arrives_one_pass_at_a_time():
    """The same shares when placements happen in many small passes (as the dispatcher does)."""
    tenants = [
        tenant("c1-pool", "c1", gpu=150),
        tenant("1a", "c1", gpu=0),
        tenant("1b", "c1", gpu=0),
        tenant("1c", "c1", gpu=0, weight=3),
    ]
    fleet = [worker(f"w{i:02d}", cpu=64, gpus=8, capacity=64) for i in range(20)]
    queue = PendingQueue()
    for seq in range(270):
        name = ("1a", "1b", "1c")[seq % 3]
        queue.add(f"{name}-{seq}", gpus(1, name), seq)
    accounts = Accounts(tenants, capacity=capacity_of(w.resources for w in fleet))
    held: dict[str, int] = {}
    views = {w.name: w for w in fleet}
    while True:
        placements = schedule(queue, list(views.values()), accounts=accounts, limit=7)
        if not placements:
            break
        for p in placements:
            queue.remove(p.execution_id)
            accounts.charge(p.shape.tenant, p.shape.demand)
            held[p.shape.tenant] = held.get(p.shape.tenant, 0) + 1
            view = views[p.worker]
            views[p.worker] = worker(
                view.name, cpu=64, gpus=8, capacity=64, held_gpus=set(view.held_gpus) | set(p.gpu_indices)
            )
    assert held == {"1a": 30, "1b": 30, "1c": 90}


# ---- the tenant's declared form ---------------------------------------------------------------


def test_tenant_round_trips_through_its_dict_form():
    declared = {
        "name": "ml",
        "gpu": 4,
        "memory": "64Gi",
        "cohort": "research",
        "borrowing_limit": {"gpu": 2},
        "lending_limit": {"memory": "16Gi"},
        "weight": 2,
    }
    parsed = Tenant.from_dict(declared)
    assert parsed.quota == Limits(memory=64 * GiB, gpu=4)
    assert parsed.borrowing_limit == Limits(gpu=2)
    assert parsed.to_dict() == declared
    assert Tenant.from_dict(parsed.to_dict()) == parsed
    assert parsed.updated({"gpu": 8, "borrowing_limit": None}).to_dict() == {
        **{k: v for k, v in declared.items() if k != "borrowing_limit"},
        "gpu": 8,
    }


BAD = [
    ("bad name", {"name": "ML team"}, "name 'ML team' is invalid; a tenant name is 1-63 lowercase"),
    ("unknown field", {"name": "a", "gpus": 1}, "unknown tenant field 'gpus'; the fields are name, cpu"),
    ("negative gpu", {"name": "a", "gpu": -1}, "gpu must be between 0 and"),
    ("fractional cpu", {"name": "a", "cpu": 1.5}, "cpu must be a whole number >= 0; got 1.5"),
    ("memory typo", {"name": "a", "memory": "8GB"}, "memory: '8GB' is not a quantity (did you mean 8Gi"),
    ("zero weight", {"name": "a", "weight": 0}, "weight must be a number > 0"),
    ("weight text", {"name": "a", "weight": "heavy"}, "weight must be a number > 0 (default 1); got 'heavy'"),
    (
        "borrow without cohort",
        {"name": "a", "gpu": 1, "borrowing_limit": {"gpu": 1}},
        "borrowing_limit needs a cohort",
    ),
    (
        "limit on an unlimited resource",
        {"name": "a", "cohort": "c", "lending_limit": {"gpu": 1}},
        "lending_limit.gpu is set but gpu has no quota",
    ),
    (
        "limit not a mapping",
        {"name": "a", "cohort": "c", "gpu": 1, "borrowing_limit": 3},
        "borrowing_limit must be a mapping",
    ),
    (
        "unknown limit resource",
        {"name": "a", "cohort": "c", "gpu": 1, "borrowing_limit": {"disk": 1}},
        "unknown resource 'disk'",
    ),
]


@pytest.mark.parametrize(("data", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_tenant_fields_are_named(data, message):
    with pytest.raises((TypeError, ValueError)) as caught:
        Tenant.from_dict(data)
    assert message in str(caught.value)


# ---- explain ---------------------------------------------------------------------------------


def test_explain_leads_with_the_quota_that_holds_it_back():
    accounts = Accounts(
        [tenant("ml", "research", {"gpu": 2}, gpu=4), tenant("web", "research", gpu=2)],
        capacity=(0, 0, 8, 0, 0),
    )
    accounts.charge("ml", (0, 0, 4, 0, 0))
    accounts.charge("web", (0, 0, 2, 0, 0))
    found = explain(gpus(1, "ml"), [worker("w", gpus=8, held_gpus={0, 1, 2, 3, 4, 5})], accounts=accounts)
    assert found.quota is not None
    assert found.summary == (
        "tenant ml at its gpu quota 4/4, borrowing 0 of 2 in cohort research "
        "(the cohort has no gpu left to lend); 1/1 workers can run it"
    )


def test_explain_without_a_quota_block_says_only_the_workers():
    accounts = Accounts([tenant("ml", gpu=4)], capacity=(0, 0, 8, 0, 0))
    found = explain(gpus(1, "ml"), [worker("w", gpus=0)], accounts=accounts)
    assert found.quota is None
    assert found.summary.startswith("0/1 workers can run it")


def test_explain_names_the_fair_share_place():
    accounts = Accounts([tenant("a"), tenant("b"), tenant("c")], capacity=(0, 0, 10, 0, 0))
    accounts.charge("a", (0, 0, 5, 0, 0))
    accounts.charge("b", (0, 0, 1, 0, 0))
    queue = PendingQueue()
    for seq, name in enumerate("abc"):
        queue.add(f"{name}{seq}", gpus(1, name), seq)
    found = explain(gpus(1, "b"), [worker("w", gpus=0)], accounts=accounts, queue=queue)
    assert found.fair_share == (2, 3)
    assert found.summary.endswith("; fair share: tenant b is 2nd of 3 tenants waiting (share 0.10)")


def test_admit_refuses_what_would_pass_a_quota_given_the_whole_clusters_usage_in_order() -> None:
    """The check each replica's claim runs: usage as the database has it, dispatches in placement order."""
    tenants = [
        Tenant("ml", Limits(cpu=3), "research"),
        Tenant("web", Limits(cpu=1), "research"),
        Tenant("solo", Limits(cpu=2)),
    ]
    one = (1, 0, 0, 0, 0)
    # ml holds 3 (its quota) and may borrow web's idle core once; solo has no cohort: 2 at most.
    held = {"ml": (3, 0, 0, 0, 0), "solo": (1, 0, 0, 0, 0)}
    wanted = [
        ("m1", "ml", one),
        ("m2", "ml", one),
        ("s1", "solo", one),
        ("s2", "solo", one),
        ("d1", "default", one),
    ]
    assert admit(tenants, held, wanted) == {"m2", "s2"}
    # With web using its own core, ml has nothing left to borrow.
    assert admit(tenants, {**held, "web": one}, wanted) == {"m1", "m2", "s2"}


# ---- the executions quota: every execution holds one slot, requests or not -------------------

NOTHING = ResourceRequest()

SLOT_CASES = [
    # (id, tenants, executions each already runs, who asks, what it asks, fits, reason shown)
    ("request-less under quota", [tenant("solo", executions=2)], {"solo": 1}, "solo", NOTHING, True, None),
    (
        "request-less at quota",
        [tenant("solo", cpu=1, executions=1)],
        {"solo": 1},
        "solo",
        NOTHING,
        False,
        "tenant solo at its executions quota 1/1",
    ),
    (
        "cpu work at the executions quota though under the cpu one",
        [tenant("solo", cpu=4, executions=1)],
        {"solo": 1},
        "solo",
        ResourceRequest(cpu=1),
        False,
        "tenant solo at its executions quota 1/1",
    ),
    (
        "no executions quota: request-less is unlimited",
        [tenant("solo", cpu=1)],
        {"solo": 7},
        "solo",
        NOTHING,
        True,
        None,
    ),
    (
        "borrows the cohort's unused slots",
        [tenant("solo", "team", executions=1), tenant("ml", "team", executions=6)],
        {"solo": 6},
        "solo",
        NOTHING,
        True,
        None,
    ),
    (
        "the cohort has no slot left to lend",
        [tenant("solo", "team", executions=1), tenant("ml", "team", executions=6)],
        {"solo": 7},
        "solo",
        NOTHING,
        False,
        "tenant solo at its executions quota 7/1, borrowing 6 of no limit in cohort team "
        "(the cohort has no executions left to lend)",
    ),
    (
        "borrowing limit on slots",
        [tenant("solo", "team", {"executions": 2}, executions=1), tenant("ml", "team", executions=6)],
        {"solo": 3},
        "solo",
        NOTHING,
        False,
        "tenant solo at its executions quota 3/1, borrowing 2 of 2 in cohort team",
    ),
    (
        "lending limit keeps slots back",
        [tenant("solo", "team", executions=1), tenant("ml", "team", lend={"executions": 1}, executions=6)],
        {"solo": 2},
        "solo",
        NOTHING,
        False,
        "tenant solo at its executions quota 2/1, borrowing 1 of no limit in cohort team "
        "(the cohort has no executions left to lend)",
    ),
]


@pytest.mark.parametrize(
    ("tenants", "running", "who", "asked", "fits", "reason"),
    [c[1:] for c in SLOT_CASES],
    ids=[c[0] for c in SLOT_CASES],
)
def test_executions_quota_rule(tenants, running, who, asked, fits, reason):
    accounts = Accounts(tenants, capacity=(8, 0, 0, 0, 8))
    for name, count in running.items():
        for _ in range(count):
            accounts.charge(name, demand(NOTHING))
    block = Ledger(accounts).blocked(who, demand(asked))
    assert (block is None) == fits
    assert (block.describe() if block else None) == reason


def test_request_less_work_counts_in_the_fair_share():
    # Over 8 slots, 4 request-less executions above a nominal of 0 are half the fleet.
    accounts = Accounts([tenant("solo", executions=0), tenant("ml")], capacity=(8, 0, 0, 0, 8))
    assert accounts.share("solo", (0, 0, 0, 0, 4)) == 0.5
    assert accounts.share("ml", (0, 0, 0, 0, 2)) == 0.25  # no quota: measured from 0


def test_solo_cannot_crowd_out_ml_with_request_less_work():
    """Issue 40: solo (1 core) ran 6 request-less executions and a cpu=1 one, holding 7 of 8 slots.
    With an executions quota it holds at most that many; ml's work is placed beside it."""
    fleet = [worker("w", cpu=8, capacity=8)]
    accounts = Accounts(
        [tenant("solo", cpu=1, executions=2), tenant("ml", cpu=2)],
        capacity=capacity_of((w.resources for w in fleet), 8),
    )
    queue = PendingQueue()
    for seq in range(6):
        queue.add(f"solo-{seq}", Shape(NOTHING, tenant="solo"), seq)
    queue.add("solo-cpu", Shape(ResourceRequest(cpu=1), tenant="solo"), 6)
    queue.add("ml-0", Shape(ResourceRequest(cpu=1), tenant="ml"), 7)
    placed = {p.execution_id for p in schedule(queue, fleet, accounts=accounts)}
    assert "ml-0" in placed
    assert sum(name.startswith("solo") for name in placed) == 2
    why = explain(Shape(NOTHING, tenant="solo"), fleet, accounts=_charged(accounts, placed))
    assert why.summary.startswith("tenant solo at its executions quota 2/2")


def _charged(accounts: Accounts, placed: set[str]) -> Accounts:
    after = accounts.copy()
    for execution_id in placed:
        name = execution_id.split("-")[0]
        after.charge(name, demand(ResourceRequest(cpu=1) if execution_id.endswith("cpu") else NOTHING))
    return after
