"""Placement policies (issue 45), pure matcher: fragmentation, and what binpack costs per placement.

- ``fragmentation``: 1,000 random GPU jobs (1, 2, 4 or 8 GPUs, equally likely, seeded) arrive one
  at a time on 8-GPU workers and never finish; each is one submission's pass over the
  ``FleetIndex`` (as the dispatcher runs it), the index told of each placement. Per policy: the
  jobs placed before the first 8-GPU job waits, jobs placed in all, 8-GPU jobs left waiting, and
  workers left empty (nothing running: a pool could scale them in). Two fleets: one with room
  for the whole workload (512 workers, 4,096 GPUs for about 3,750 asked) and one with half.
- ``per_placement``: 10,000 workers (bench.matching's fleet) in a ``FleetIndex``; 2,000
  submissions of its feasible shapes, one pass each, the index updated after each placement.
  CPU microseconds per pass and the workers looked at per placement (rooms tested with
  ``fits_now``, counted by wrapping it here: a figure this shared box's load cannot move),
  spread against binpack: neither walks the fleet per placement.
- ``throughput``: bench.matching's 10,000 workers x 100,000 pending pass, under each policy
  (CPU seconds of this process, so other processes on the box count less).
"""

from __future__ import annotations

import random
import time
from dataclasses import replace

import flux.matching.candidates
import flux.matching.packing
from bench.common import percentiles, write
from bench.matching import FEASIBLE_SHAPES, PENDING, WORKERS, fleet, queue_of
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import Gpu, WorkerResources
from flux.matching import Amounts, FeasibilityCache, PendingQueue, Placement, Shape, WorkerView, schedule
from flux.matching.index import FleetIndex

GiB = 1024**3
POLICIES = ("spread", "binpack")
JOBS = 1000
SIZES = (1, 2, 4, 8)
GPU_SHAPES = {n: Shape(ResourceRequest(cpu=1, gpu=n)) for n in SIZES}


def _gpu_worker(i: int) -> WorkerView:
    resources = WorkerResources(
        cpu_total=64,
        cpu_available=64,
        memory_total=512 * GiB,
        memory_available=512 * GiB,
        disk_total=1000 * GiB,
        disk_free=1000 * GiB,
        gpus=tuple(Gpu(index=g, memory_total=80 * GiB, memory_free=80 * GiB) for g in range(8)),
    )
    return WorkerView(f"g{i:04d}", resources)


def _after(view: WorkerView, placement: Placement) -> WorkerView:
    """The worker's view once ``placement`` is reserved there (what the registry tells the index)."""
    r = placement.shape.requests
    return replace(
        view,
        active=view.active + 1,
        reserved=view.reserved + Amounts(r.cpu, r.memory, r.disk),
        unreported=view.unreported + Amounts(r.cpu, r.memory, r.disk),
        held_gpus=view.held_gpus | frozenset(placement.gpu_indices),
    )


def _place_one(index: FleetIndex, cache: FeasibilityCache, execution: str, shape: Shape, policy: str) -> bool:
    queue = PendingQueue()
    queue.add(execution, shape, 0)
    placed = schedule(queue, index, shapes=[shape], cache=cache, placement=policy)
    for p in placed:
        view = index.get(p.worker)
        assert view is not None
        index.put(_after(view, p))
    return bool(placed)


def fragmentation(workers: int, seed: int = 45) -> dict[str, object]:
    rng = random.Random(seed)
    jobs = [rng.choice(SIZES) for _ in range(JOBS)]
    result: dict[str, object] = {
        "workers": workers,
        "gpus": workers * 8,
        "jobs": JOBS,
        "gpus_asked": sum(jobs),
        "jobs_by_size": {str(n): jobs.count(n) for n in SIZES},
    }
    for policy in POLICIES:
        index, cache = FleetIndex(), FeasibilityCache()
        for i in range(workers):
            index.put(_gpu_worker(i))
        placed = 0
        before_first_wait: int | None = None
        waiting_8 = 0
        for n, size in enumerate(jobs):
            if _place_one(index, cache, f"j{n}", GPU_SHAPES[size], policy):
                placed += 1
            elif size == 8:
                waiting_8 += 1
                if before_first_wait is None:
                    before_first_wait = placed
        views = list(index.views())
        result[policy] = {
            "jobs_placed_before_first_8_gpu_wait": placed if before_first_wait is None else before_first_wait,
            "an_8_gpu_job_waited": before_first_wait is not None,
            "jobs_placed": placed,
            "gpus_placed": sum(len(v.held_gpus) for v in views),
            "8_gpu_jobs_waiting": waiting_8,
            "workers_left_empty": sum(1 for v in views if v.active == 0),
            "workers_with_1_to_7_gpus_free": sum(1 for v in views if 0 < 8 - len(v.held_gpus) < 8),
        }
    return result


class _Looked:
    """Counts the rooms the matcher tests for fit: each is one worker looked at."""

    def __init__(self) -> None:
        self.count = 0
        self._fits = flux.matching.packing.fits_now

    def __enter__(self) -> _Looked:
        def counted(shape: Shape, room: object) -> bool:
            self.count += 1
            return self._fits(shape, room)  # type: ignore[arg-type]

        flux.matching.packing.fits_now = counted  # type: ignore[assignment]
        flux.matching.candidates.fits_now = counted  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        flux.matching.packing.fits_now = self._fits
        flux.matching.candidates.fits_now = self._fits


def per_placement(submissions: int = 2000, seed: int = 7) -> dict[str, object]:
    result: dict[str, object] = {"workers": WORKERS, "submissions": submissions}
    for policy in POLICIES:
        rng = random.Random(seed)
        index, cache = FleetIndex(), FeasibilityCache()
        for view in fleet(rng, WORKERS):
            index.put(view)
        _place_one(index, cache, "warm", FEASIBLE_SHAPES[0], policy)  # binpack's first ask sorts its order
        times, placed = [], 0
        for n in range(submissions):
            shape = rng.choice(FEASIBLE_SHAPES)
            started = time.process_time()
            placed += _place_one(index, cache, f"s{n}", shape, policy)
            times.append(time.process_time() - started)
        with _Looked() as looked:  # the same submissions again, counted apart from the timing
            rng = random.Random(seed)
            index, cache = FleetIndex(), FeasibilityCache()
            for view in fleet(rng, WORKERS):
                index.put(view)
            _place_one(index, cache, "warm", FEASIBLE_SHAPES[0], policy)
            looked.count = 0
            for n in range(submissions):
                _place_one(index, cache, f"s{n}", rng.choice(FEASIBLE_SHAPES), policy)
        result[policy] = {
            "placed": placed,
            "cpu_us_per_pass": percentiles(times, 1e6),
            "workers_looked_at_per_placement": round(looked.count / submissions, 2),
        }
    return result


def throughput(rounds: int = 3) -> dict[str, object]:
    rng = random.Random(7)
    workers = fleet(rng, WORKERS)
    result: dict[str, object] = {"workers": WORKERS, "pending": PENDING, "infeasible_fraction": 0.10}
    for policy in POLICIES:
        runs, placed = [], 0
        for _ in range(rounds):
            queue = queue_of(rng, PENDING, 0.10)
            started = time.process_time()
            placed = len(schedule(queue, workers, cache=FeasibilityCache(), placement=policy))
            runs.append(time.process_time() - started)
        rates = sorted(placed / r for r in runs)
        result[policy] = {
            "placements_per_pass": placed,
            "pass_cpu_seconds": percentiles(runs, 1.0),
            "placements_per_second_median": round(rates[len(rates) // 2]),
        }
    return result


def main() -> dict[str, object]:
    result = {
        "fragmentation": [fragmentation(512), fragmentation(256)],
        "per_placement": per_placement(),
        "throughput": throughput(),
    }
    write("placement", result)
    return result


if __name__ == "__main__":
    main()
