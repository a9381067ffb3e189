"""Properties of tenants through the real ``schedule``, over simulated fleets and many passes.

The quota rule is re-read here from its statement (a tenant stays within its
nominal quota plus its borrowing limit; a cohort's members never use beyond
their guaranteed parts more than the cohort lends), not taken from
``flux.matching.tenancy``, so the matcher is checked against the spec.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import RESOURCES, Limits, Tenant
from flux.matching import Accounts, Aging, PendingQueue, Shape, capacity_of, schedule
from tests.unit.fleet import GiB, worker

SETTINGS = settings(max_examples=120, deadline=None)
NAMES = ("t0", "t1", "t2", "t3")


@st.composite
def tenant_sets(draw):
    tenants = []
    for name in NAMES:
        cohort = draw(st.sampled_from(["", "c", "c", "d"]))
        quota = {
            "cpu": draw(st.one_of(st.none(), st.integers(0, 12))),
            "gpu": draw(st.one_of(st.none(), st.integers(0, 6))),
            "memory": draw(st.one_of(st.none(), st.integers(0, 24).map(lambda g: g * GiB))),
            "executions": draw(st.one_of(st.none(), st.integers(0, 10))),
        }
        borrow, lend = {}, {}
        if cohort:
            for r, n in quota.items():
                if n is not None and draw(st.booleans()):
                    borrow[r] = draw(st.integers(0, 4)) * (GiB if r == "memory" else 1)
                if n is not None and draw(st.booleans()):
                    lend[r] = draw(st.integers(0, n // (GiB if r == "memory" else 1))) * (
                        GiB if r == "memory" else 1
                    )
        weight = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
        tenants.append(Tenant(name, Limits(**quota), cohort, Limits(**borrow), Limits(**lend), weight))
    return tenants


SHAPES = [
    ResourceRequest(cpu=1),
    ResourceRequest(cpu=2, memory="2Gi"),
    ResourceRequest(gpu=1),
    ResourceRequest(cpu=1, gpu=2, memory="4Gi"),
    ResourceRequest(memory="1Gi"),
    ResourceRequest(),
]


def within_quota(tenants: list[Tenant], usage: dict[str, list[int]]) -> list[str]:
    """Every breach of the rule as stated, as text (empty when none)."""
    breaches = []
    by_cohort: dict[str, list[Tenant]] = {}
    for t in tenants:
        used = usage.get(t.name, [0, 0, 0, 0, 0])
        for i, r in enumerate(RESOURCES):
            n = t.quota.get(r)
            if n is None:
                continue
            borrow = t.borrowing_limit.get(r)
            ceiling = n if not t.cohort else (n + borrow if borrow is not None else None)
            if ceiling is not None and used[i] > ceiling:
                breaches.append(f"{t.name} uses {used[i]} {r} over {ceiling}")
        if t.cohort:
            by_cohort.setdefault(t.cohort, []).append(t)
    for cohort, members in by_cohort.items():
        for i, r in enumerate(RESOURCES):
            quoted = [m for m in members if m.quota.get(r) is not None]
            lendable = {
                m.name: min(m.quota.get(r), m.lending_limit.get(r))
                if m.lending_limit.get(r) is not None
                else m.quota.get(r)
                for m in quoted
            }
            pool = sum(lendable.values())
            drawn = sum(
                max(0, usage.get(m.name, [0, 0, 0, 0, 0])[i] - (m.quota.get(r) - lendable[m.name]))
                for m in quoted
            )
            if drawn > pool:
                breaches.append(f"cohort {cohort} draws {drawn} {r} from a pool of {pool}")
    return breaches


@SETTINGS
@given(tenants=tenant_sets(), seed=st.integers(0, 2**32 - 1), workers=st.integers(1, 6), aging=st.booleans())
def test_no_tenant_ever_exceeds_quota_plus_borrowing(tenants, seed, workers, aging):
    """Over many passes of submissions, finishes and placements, with or without aging (whose
    starving executions are placed or nominated ahead of everything)."""
    rng = random.Random(seed)
    starvation = Aging(after=15.0) if aging else None
    fleet = [worker(f"w{i}", cpu=8, memory="32Gi", gpus=4, capacity=8) for i in range(workers)]
    accounts = Accounts(tenants, capacity=capacity_of((w.resources for w in fleet), 8 * workers))
    queue = PendingQueue()
    running: dict[str, tuple[str, tuple[int, ...], str]] = {}  # id -> (tenant, demand, worker)
    held: dict[str, list] = {w.name: [] for w in fleet}  # worker -> placements held
    usage: dict[str, list[int]] = {}
    seq = 0
    for now in range(0, 120, 10):  # passes: submit some, finish some, schedule
        for _ in range(rng.randint(0, 12)):
            shape = Shape(rng.choice(SHAPES), tenant=rng.choice(NAMES))
            queue.add(f"e{seq}", shape, seq, priority=rng.randint(0, 2), since=float(now))
            seq += 1
        for execution_id in rng.sample(sorted(running), k=len(running) // 3):
            name, amount, where = running.pop(execution_id)
            accounts.refund(name, amount)
            usage[name] = [u - a for u, a in zip(usage[name], amount, strict=True)]
            held[where] = [p for p in held[where] if p.execution_id != execution_id]
        views = [_busy(w, held[w.name]) for w in fleet]
        limit = rng.choice([None, 3])
        for p in schedule(queue, views, accounts=accounts, limit=limit, aging=starvation, now=float(now)):
            queue.remove(p.execution_id)
            name, amount = p.shape.tenant, p.shape.demand
            accounts.charge(name, amount)
            usage[name] = [u + a for u, a in zip(usage.get(name, [0, 0, 0, 0, 0]), amount, strict=True)]
            running[p.execution_id] = (name, amount, p.worker)
            held[p.worker].append(p)
        assert within_quota(tenants, usage) == []


def _busy(view, placements):
    """``view`` with ``placements`` reserved on it, as the dispatcher's registry would show it."""
    cpu = sum(p.shape.requests.cpu for p in placements)
    memory = sum(p.shape.requests.memory for p in placements)
    return worker(
        view.name,
        cpu=8,
        memory="32Gi",
        gpus=4,
        capacity=8,
        active=len(placements),
        reserved={"cpu": cpu, "memory": memory},
        held_gpus={g for p in placements for g in p.gpu_indices},
    )


@SETTINGS
@given(
    weights=st.lists(st.sampled_from([1.0, 2.0, 3.0, 4.0]), min_size=2, max_size=5),
    gpu_total=st.integers(8, 64),
    limit=st.sampled_from([None, 1, 5]),
)
def test_equal_demand_converges_to_the_weights(weights, gpu_total, limit):
    """Tenants with equal, unbounded demand for 1-GPU work share the fleet in proportion to their weights.

    Greedy DRF (progressive filling) is within one execution of exact: each tenant's last
    execution went when its share was no higher than anyone else's.
    """
    names = [f"t{i}" for i in range(len(weights))]
    tenants = [Tenant(n, weight=w) for n, w in zip(names, weights, strict=True)]
    fleet = [worker(f"w{i}", cpu=64, gpus=1, capacity=64) for i in range(gpu_total)]
    accounts = Accounts(tenants, capacity=capacity_of(w.resources for w in fleet))
    queue = PendingQueue()
    demand_each = gpu_total  # everyone alone could fill the fleet
    seq = 0
    for i in range(demand_each):
        for n in names:
            queue.add(f"{n}-{i}", Shape(ResourceRequest(gpu=1), tenant=n), seq)
            seq += 1
    got = dict.fromkeys(names, 0)
    views = {w.name: w for w in fleet}
    while True:
        placements = schedule(queue, list(views.values()), accounts=accounts, limit=limit)
        if not placements:
            break
        for p in placements:
            queue.remove(p.execution_id)
            accounts.charge(p.shape.tenant, p.shape.demand)
            got[p.shape.tenant] += 1
            views.pop(p.worker)  # its only GPU is held
    assert sum(got.values()) == gpu_total
    for a, wa in zip(names, weights, strict=True):
        for b, wb in zip(names, weights, strict=True):
            # a's last execution went when its share (without it) was no higher than b's.
            if got[a]:
                assert (got[a] - 1) / wa <= got[b] / wb + 1e-9, got
        # So each is within one execution per tenant of its exact weighted part.
        exact = gpu_total * wa / sum(weights)
        assert abs(got[a] - exact) <= len(weights), (got, exact)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_with_one_unlimited_tenant_tenants_change_nothing(seed):
    """The default deployment (everyone in one tenant, no quota) places exactly as before tenants."""
    rng = random.Random(seed)
    fleet = [
        worker(f"w{i}", cpu=rng.choice([2, 4, 8]), memory="16Gi", gpus=rng.choice([0, 1, 2]))
        for i in range(5)
    ]
    plain, tenanted = PendingQueue(), PendingQueue()
    for seq in range(rng.randint(1, 40)):
        shape = Shape(rng.choice(SHAPES))
        priority = rng.randint(0, 3)
        plain.add(f"e{seq}", shape, seq, priority)
        tenanted.add(f"e{seq}", shape, seq, priority)
    accounts = Accounts(capacity=capacity_of(w.resources for w in fleet))
    first = schedule(plain, fleet)
    second = schedule(tenanted, fleet, accounts=accounts)
    assert [(p.execution_id, p.worker, p.gpu_indices) for p in first] == [
        (p.execution_id, p.worker, p.gpu_indices) for p in second
    ]


@SETTINGS
@given(tenants=tenant_sets(), seed=st.integers(0, 2**32 - 1), workers=st.integers(1, 4))
def test_opening_tenants_lazily_places_as_opening_every_lane(tenants, seed, workers):
    """A pass over all lanes opens tenants as they come up (lower-bound keys); the answer is the
    same as with every lane opened up front (the path a pass scoped to shapes takes)."""
    rng = random.Random(seed)
    fleet = [
        worker(
            f"w{i}", cpu=rng.choice([2, 8]), memory="32Gi", gpus=rng.choice([0, 4]), active=rng.randint(0, 6)
        )
        for i in range(workers)
    ]
    accounts = Accounts(tenants, capacity=capacity_of((w.resources for w in fleet), 16 * workers))
    for name in NAMES:
        if rng.random() < 0.5:
            accounts.charge(
                name, (rng.randint(0, 6), rng.randint(0, 8) * GiB, rng.randint(0, 3), 0, rng.randint(1, 6))
            )
    queue = PendingQueue()
    for seq in range(rng.randint(0, 60)):
        queue.add(f"e{seq}", Shape(rng.choice(SHAPES), tenant=rng.choice(NAMES)), seq, rng.randint(0, 2))
    for execution_id in rng.sample([f"e{i}" for i in range(len(queue))], k=len(queue) // 4):
        queue.remove(execution_id)
    limit = rng.choice([None, 1, 4])
    lazily = schedule(queue, fleet, accounts=accounts, limit=limit)
    eagerly = schedule(queue, fleet, shapes=queue.shapes(), accounts=accounts, limit=limit)
    assert [(p.execution_id, p.worker) for p in lazily] == [(p.execution_id, p.worker) for p in eagerly]


@SETTINGS
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 30), st.sampled_from(NAMES), st.integers(0, 5)), max_size=80
    )
)
def test_queue_knows_each_tenants_first_item(ops):
    queue = PendingQueue()
    for add, number, name, shape_at in ops:
        if add:
            queue.add(f"e{number}", Shape(SHAPES[shape_at], tenant=name), number, priority=number % 3)
        else:
            queue.remove(f"e{number}")
        expected = {}
        for shape in queue.shapes():
            for item in queue.iter_shape(shape):
                best = expected.get(shape.tenant)
                if best is None or item.order < best.order:
                    expected[shape.tenant] = item
        assert dict(queue.tenants()) == expected
        assert sorted(map(repr, queue.requirements())) == sorted({repr(s.needs) for s in queue.shapes()})


@st.composite
def slot_tenants(draw):
    """Tenants with an ``executions`` quota (and perhaps a cpu one), some in one cohort."""
    tenants = []
    for name in NAMES:
        cohort = draw(st.sampled_from(["", "c", "c"]))
        executions = draw(st.integers(0, 6))
        cpu = draw(st.one_of(st.none(), st.integers(0, 8)))
        borrow = {"executions": draw(st.integers(0, 4))} if cohort and draw(st.booleans()) else {}
        lend = {"executions": draw(st.integers(0, executions))} if cohort and draw(st.booleans()) else {}
        quota = Limits(cpu=cpu, executions=executions)
        tenants.append(Tenant(name, quota, cohort, Limits(**borrow), Limits(**lend)))
    return tenants


@SETTINGS
@given(tenants=slot_tenants(), seed=st.integers(0, 2**32 - 1), workers=st.integers(1, 3))
def test_request_less_work_never_exceeds_an_executions_quota(tenants, seed, workers):
    """Work that requests nothing (most of it here) still holds one of its tenant's execution slots:
    no tenant runs more at once than its ``executions`` quota, unless borrowing within its cohort's
    limits (its borrowing_limit, and what the cohort's members lend)."""
    rng = random.Random(seed)
    fleet = [worker(f"w{i}", cpu=8, memory="32Gi", gpus=4, capacity=8) for i in range(workers)]
    accounts = Accounts(tenants, capacity=capacity_of((w.resources for w in fleet), 8 * workers))
    queue = PendingQueue()
    running: dict[str, tuple[str, tuple[int, ...], str]] = {}
    held: dict[str, list] = {w.name: [] for w in fleet}
    usage: dict[str, list[int]] = {}
    shapes = [ResourceRequest(), ResourceRequest(), ResourceRequest(cpu=1)]
    seq = 0
    for _ in range(10):
        for _ in range(rng.randint(0, 16)):
            queue.add(f"e{seq}", Shape(rng.choice(shapes), tenant=rng.choice(NAMES)), seq)
            seq += 1
        for execution_id in rng.sample(sorted(running), k=len(running) // 3):
            name, amount, where = running.pop(execution_id)
            accounts.refund(name, amount)
            usage[name] = [u - a for u, a in zip(usage[name], amount, strict=True)]
            held[where] = [p for p in held[where] if p.execution_id != execution_id]
        for p in schedule(queue, [_busy(w, held[w.name]) for w in fleet], accounts=accounts):
            queue.remove(p.execution_id)
            name, amount = p.shape.tenant, p.shape.demand
            assert amount[RESOURCES.index("executions")] == 1  # requests or not, one slot
            accounts.charge(name, amount)
            usage[name] = [u + a for u, a in zip(usage.get(name, [0] * 5), amount, strict=True)]
            running[p.execution_id] = (name, amount, p.worker)
            held[p.worker].append(p)
        assert within_quota(tenants, usage) == []
        assert all(len(placements) <= 8 for placements in held.values())  # never past a worker's slots
