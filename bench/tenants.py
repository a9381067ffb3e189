"""Placement cost with tenants: 100 tenants x 10,000 pending against today's one tenant.

Figure (issue 24): with quotas, cohorts and fair share on, a placement costs at
most 1.5x what it costs with every execution in one tenant. Measured three ways,
as the dispatcher runs passes:

- ``full_pass``: the safety tick's pass over the whole fleet (its ``FleetIndex``),
  cost per placement;
- ``submission``: one new execution, a pass scoped to its shape;
- ``freed_worker``: one worker finishes one execution, a pass scoped to it.

The same pending executions (shapes, priorities, order) are queued both ways;
only the tenant each belongs to differs. Times are this process's CPU time, both
sides alternated. Run alone: ``python -m bench.tenants``.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from dataclasses import replace

from bench.common import machine, write
from bench.matching import FEASIBLE_SHAPES, fleet
from flux.domain.tenant import Limits, Tenant
from flux.matching import Accounts, FeasibilityCache, PendingQueue, capacity_of, schedule
from flux.matching.index import FleetIndex

GiB = 1024**3
# CPU time of this process: on a shared machine, time spent descheduled is not the scheduler's cost.
_clock = time.process_time
WORKERS = 2_000
PENDING = 10_000
TENANTS = 100
ROUNDS = 10
SCOPED = 300


def tenants(rng: random.Random) -> list[Tenant]:
    """100 tenants: ten cohorts of nine, and ten alone; quotas loose enough that most work fits."""
    out = []
    for i in range(TENANTS):
        cohort = f"c{i // 9}" if i < 90 else ""
        quota = Limits(
            cpu=rng.randint(200, 600), memory=rng.randint(800, 2400) * GiB, gpu=rng.randint(10, 60)
        )
        borrow = Limits(gpu=rng.randint(0, 20)) if cohort and rng.random() < 0.5 else Limits()
        out.append(Tenant(f"t{i:03d}", quota, cohort, borrow, Limits(), float(rng.choice([1, 2, 3, 4]))))
    return out


def queues(rng: random.Random) -> tuple[PendingQueue, PendingQueue]:
    one, many = PendingQueue(), PendingQueue()
    for seq in range(PENDING):
        shape = rng.choice(FEASIBLE_SHAPES)
        priority = rng.choice([0, 0, 0, 1, 5])
        one.add(f"e{seq:06d}", shape, seq, priority)
        many.add(f"e{seq:06d}", shape.for_tenant(f"t{rng.randrange(TENANTS):03d}"), seq, priority)
    return one, many


def _index(views) -> FleetIndex:
    index = FleetIndex()
    for view in views:
        index.put(view)
    return index


def full_pass(rng: random.Random, views, accounts: Accounts) -> dict[str, object]:
    per: dict[str, list[float]] = {"one_tenant": [], "tenants": []}
    placed = {}
    for _ in range(ROUNDS):
        one, many = queues(rng)
        for label, queue, acc in (("one_tenant", one, None), ("tenants", many, accounts)):
            index = _index(views)
            gc.collect()  # both sides start from the same heap: a full collection lands in neither pass by luck
            started = _clock()
            placements = schedule(queue, index, cache=FeasibilityCache(), accounts=acc)
            elapsed = _clock() - started
            per[label].append(elapsed / max(1, len(placements)))
            placed[label] = len(placements)
    return _figures(per, placed)


def submission(rng: random.Random, views, accounts: Accounts) -> dict[str, object]:
    """A backlog that fits nowhere now (the fleet is full), then one new submission each time."""
    busy = [replace(v, active=v.capacity) for v in views]
    index = _index(busy)
    index.put(views[0])  # one worker with room: each submission lands there
    one, many = queues(rng)
    per: dict[str, list[float]] = {"one_tenant": [], "tenants": []}
    cache = FeasibilityCache()
    for i in range(SCOPED):  # alternated, so both see the same machine
        for label, queue, acc in (("one_tenant", one, None), ("tenants", many, accounts)):
            shape = (
                FEASIBLE_SHAPES[0] if acc is None else FEASIBLE_SHAPES[0].for_tenant(f"t{i % TENANTS:03d}")
            )
            queue.add(f"new{i}", shape, PENDING + i)
            started = _clock()
            placements = schedule(queue, index, shapes=[shape], cache=cache, limit=1, accounts=acc)
            per[label].append(_clock() - started)
            assert placements, "the worker with room takes the submission"
            queue.remove(placements[0].execution_id)
    return _figures(per, {})


def freed_worker(rng: random.Random, views, accounts: Accounts) -> dict[str, object]:
    """A full fleet and a big backlog; one worker finishes one execution: a pass over it alone."""
    one, many = queues(rng)
    per: dict[str, list[float]] = {"one_tenant": [], "tenants": []}
    cache = FeasibilityCache()
    for i in range(SCOPED):
        view = views[i % len(views)]
        freed = replace(view, active=view.capacity - 1)
        for label, queue, acc in (("one_tenant", one, None), ("tenants", many, accounts)):
            started = _clock()
            placements = schedule(queue, [freed], cache=cache, limit=None, accounts=acc)
            per[label].append(_clock() - started)
            for p in placements:
                queue.remove(p.execution_id)
    return _figures(per, {})


def _figures(per: dict[str, list[float]], placed: dict[str, int]) -> dict[str, object]:
    """Best decile of each (the machine may be shared: noise only ever adds time), and the median."""
    out: dict[str, object] = {}
    for label, samples in per.items():
        ordered = sorted(samples)
        out[f"{label}_us"] = {
            "p10": round(ordered[len(ordered) // 10] * 1e6, 2),
            "p50": round(statistics.median(ordered) * 1e6, 2),
        }
    one, many = sorted(per["one_tenant"]), sorted(per["tenants"])
    out["ratio_p10"] = round(many[len(many) // 10] / one[len(one) // 10], 2)
    out["ratio_p50"] = round(statistics.median(many) / statistics.median(one), 2)
    out["target_ratio"] = 1.5
    if placed:
        out["placements_per_pass"] = placed
    return out


def main() -> dict[str, object]:
    rng = random.Random(24)
    views = fleet(rng, WORKERS)
    accounts = Accounts(tenants(rng), capacity=capacity_of(v.resources for v in views))
    result = {
        "workers": WORKERS,
        "pending": PENDING,
        "tenants": TENANTS,
        "full_pass_per_placement": full_pass(rng, views, accounts),
        "submission_pass": submission(rng, views, accounts),
        "freed_worker_pass": freed_worker(rng, views, accounts),
        "machine": machine(),
    }
    write("tenants", result)
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
