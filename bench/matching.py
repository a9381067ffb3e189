"""Pure matching throughput: 10,000 workers x 100,000 pending, and first placement latency.

Figures (DESIGN §7): >= 20,000 placements/s; a capable worker joining with
100,000 unmatched executions queued gets its first placement in <= 50 ms.
"""

from __future__ import annotations

import random
import time

from bench.common import percentiles, write
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.matching import FeasibilityCache, PendingQueue, Shape, WorkerView, schedule

GiB = 1024**3
WORKERS = 10_000
PENDING = 100_000

IMAGES = [
    WorkerSoftware({"numpy": "1.26.4", "pandas": "2.2.2", "scipy": "1.13.0"}, {"python_version": "3.11"}),
    WorkerSoftware(
        {"numpy": "1.26.4", "torch": "2.3.1+cu121", "transformers": "4.41.2", "accelerate": "0.30.1"},
        {"python_version": "3.11"},
    ),
    WorkerSoftware(
        {"numpy": "2.0.0", "scikit-learn": "1.5.0", "pandas": "2.2.2"}, {"python_version": "3.12"}
    ),
]

FEASIBLE_SHAPES = [
    Shape(),
    Shape(ResourceRequest(cpu=1)),
    Shape(ResourceRequest(cpu=2, memory="4Gi")),
    Shape(ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"])),
    Shape(ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]), {"role": "training"}),
    Shape(ResourceRequest(gpu=1, packages=["torch>=2.0.0", "transformers"])),
    Shape(ResourceRequest(cpu=8, memory="32Gi", gpu=2, packages=["torch>=2,<3"]), {"role": "training"}),
    Shape(ResourceRequest(memory="2Gi", disk="10Gi")),
    Shape(ResourceRequest(cpu=2, packages=["scikit-learn>=1.2.0"])),
    Shape(ResourceRequest(cpu=1), {"zone": "b"}),
]
INFEASIBLE_SHAPES = [
    Shape(ResourceRequest(cpu=512)),
    Shape(ResourceRequest(gpu=16)),
    Shape(ResourceRequest(packages=["jax>=0.4"])),
    Shape(ResourceRequest(cpu=1), {"role": "quantum"}),
]


def fleet(rng: random.Random, n: int) -> list[WorkerView]:
    workers = []
    for i in range(n):
        cpu = rng.choice([4, 8, 16, 32, 64])
        gpus = rng.choice([0, 0, 0, 1, 4, 8])
        image = rng.randrange(len(IMAGES)) if gpus == 0 else 1
        resources = WorkerResources(
            cpu_total=cpu,
            cpu_available=cpu - rng.randint(0, cpu // 4),
            memory_total=cpu * 4 * GiB,
            memory_available=cpu * 4 * GiB - rng.randint(0, 2) * GiB,
            disk_total=500 * GiB,
            disk_free=rng.randint(50, 500) * GiB,
            gpus=tuple(Gpu(index=g, memory_total=80 * GiB, memory_free=80 * GiB) for g in range(gpus)),
        )
        labels = {"role": rng.choice(["training", "inference", "batch"]), "zone": rng.choice("abc")}
        workers.append(WorkerView(f"w{i:05d}", resources, labels, IMAGES[image], active=rng.randint(0, 2)))
    return workers


def queue_of(rng: random.Random, n: int, infeasible_fraction: float) -> PendingQueue:
    queue = PendingQueue()
    for seq in range(n):
        pool = INFEASIBLE_SHAPES if rng.random() < infeasible_fraction else FEASIBLE_SHAPES
        queue.add(f"e{seq:06d}", rng.choice(pool), seq)
    return queue


def throughput(rng: random.Random, rounds: int) -> dict[str, object]:
    workers = fleet(rng, WORKERS)
    runs, placed = [], 0
    for _ in range(rounds):
        queue = queue_of(rng, PENDING, 0.10)
        started = time.perf_counter()
        placements = schedule(queue, workers, cache=FeasibilityCache())
        runs.append(time.perf_counter() - started)
        placed = len(placements)
    rates = sorted(placed / r for r in runs)
    return {
        "workers": WORKERS,
        "pending": PENDING,
        "infeasible_fraction": 0.10,
        "placements_per_pass": placed,
        "pass_seconds": percentiles(runs, 1.0),
        "placements_per_second_median": round(rates[len(rates) // 2]),
        "target_placements_per_second": 20_000,
    }


def first_placement(rng: random.Random, rounds: int) -> dict[str, object]:
    """100,000 executions no worker can take; one capable worker joins."""
    workers = fleet(rng, WORKERS)
    queue = PendingQueue()
    unmatched = [
        Shape(ResourceRequest(cpu=2, packages=["jax>=0.4"]), {"role": "quantum"}),
        Shape(ResourceRequest(gpu=16)),
        Shape(ResourceRequest(cpu=4, memory="8Gi"), {"role": "quantum"}),
    ]
    for seq in range(PENDING):
        queue.add(f"e{seq:06d}", unmatched[seq % len(unmatched)], seq)
    cache = FeasibilityCache()
    assert not schedule(queue, workers, cache=cache), "the backlog must be unmatched before the join"
    joined = WorkerView(
        "newcomer",
        WorkerResources(16, 16, 64 * GiB, 64 * GiB, 500 * GiB, 500 * GiB),
        {"role": "quantum"},
        WorkerSoftware({"jax": "0.4.30", "numpy": "1.26.4"}),
    )
    scoped, full = [], []
    for _ in range(rounds):
        # What the dispatcher does on a join: only the new worker can take anything new.
        started = time.perf_counter()
        first = schedule(queue, [joined], cache=cache, limit=1)
        scoped.append(time.perf_counter() - started)
        assert first and first[0].worker == "newcomer"
        # The safety tick's full pass over every worker, for comparison.
        started = time.perf_counter()
        first = schedule(queue, [*workers, joined], cache=cache, limit=1)
        full.append(time.perf_counter() - started)
        assert first and first[0].worker == "newcomer"
    return {
        "workers": WORKERS + 1,
        "unmatched_pending": PENDING,
        "join_scoped_pass_ms": percentiles(scoped),
        "full_pass_ms": percentiles(full),
        "target_ms": 50,
    }


def main() -> dict[str, object]:
    rng = random.Random(7)
    result = {"throughput": throughput(rng, rounds=3), "first_placement": first_placement(rng, rounds=30)}
    write("matching", result)
    return result


if __name__ == "__main__":
    main()
