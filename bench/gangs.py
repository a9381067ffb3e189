"""Gangs: the pure matcher placing gangs of 8 on 10,000 workers.

Figure (issue 45): >= 1,000 gangs of 8 placed per second by the pure matcher with 10,000
workers, each gang all or nothing; measured for a plain gang (8 least loaded workers), a gang
in one rack (``same="rack"``, 100 racks of 100) and a gang spread over zones (``spread="zone"``,
16 zones), over the fleet's ``FleetIndex`` as the dispatcher reads it. One pass places a
backlog of gangs (as after a burst of submissions), and single-gang passes (one submission
each, as the submit path runs) are timed one by one.
Then ``bench.gangs_server``: the p99 from a gang's submission to all its members dispatched,
through a real server with simulated workers (target <= 20 ms when room exists).
"""

from __future__ import annotations

import json
import time

from bench import gangs_server
from bench.common import percentiles, write
from flux.domain.gang import Gang
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.matching import FeasibilityCache, PendingQueue, Shape, WorkerView, schedule
from flux.matching.index import FleetIndex

GiB = 1024**3
WORKERS = 10_000
GANG = 8
BACKLOG = 1_000  # gangs of 8 in one pass: 8,000 members


def fleet() -> FleetIndex:
    index = FleetIndex()
    software = WorkerSoftware({}, {"python_version": "3.12"})
    for i in range(WORKERS):
        resources = WorkerResources(
            cpu_total=32,
            cpu_available=32,
            memory_total=256 * GiB,
            memory_available=256 * GiB,
            disk_total=1000 * GiB,
            disk_free=1000 * GiB,
            gpus=tuple(Gpu(g, f"GPU-{g}", "H100", 80 * GiB, 80 * GiB) for g in range(8)),
        ).validate()
        labels = {"rack": f"r{i // 100:03d}", "zone": f"z{i % 16:02d}"}
        index.put(WorkerView(f"w{i:05d}", resources, labels, software, capacity=16))
    return index


SHAPES = {
    "plain": Shape(ResourceRequest(gpu=1), gang=Gang(GANG)),
    "same_rack": Shape(ResourceRequest(gpu=1), gang=Gang(GANG, same="rack")),
    "spread_zone": Shape(ResourceRequest(gpu=1), gang=Gang(GANG, spread="zone")),
}


def backlog(index: FleetIndex, shape: Shape, rounds: int = 3) -> dict[str, object]:
    """One pass over ``BACKLOG`` gangs, ``rounds`` times on the same fleet (fresh queue and cache):
    the median, since the shared box's speed moves between rounds."""
    rates = []
    for _ in range(rounds):
        queue = PendingQueue()
        for i in range(BACKLOG):
            queue.add(f"g{i}", shape, i)
        started = time.perf_counter()
        placements = schedule(queue, index, cache=FeasibilityCache())
        elapsed = time.perf_counter() - started
        assert len(placements) == BACKLOG and all(len(p.members) == GANG for p in placements)
        rates.append(round(len(placements) / elapsed))
    return {"gangs": BACKLOG, "gangs_per_second": sorted(rates)[len(rates) // 2], "rounds": rates}


def one_by_one(index: FleetIndex, shape: Shape, rounds: int = 100) -> dict[str, object]:
    """Each submission its own pass over the whole fleet (the submit path's shape-scoped pass)."""
    cache = FeasibilityCache()
    samples = []
    for i in range(rounds):
        queue = PendingQueue()
        queue.add(f"g{i}", shape, i)
        started = time.perf_counter()
        placements = schedule(queue, index, shapes=[shape], cache=cache)
        samples.append(time.perf_counter() - started)
        assert len(placements) == 1
    return {
        "passes": rounds,
        "per_gang_ms": percentiles(samples),
        "gangs_per_second": round(rounds / sum(samples)),
    }


def main() -> dict[str, object]:
    index = fleet()
    result: dict[str, object] = {"workers": WORKERS, "gang_size": GANG, "target_gangs_per_second": 1000}
    for name, shape in SHAPES.items():
        result[name] = {"backlog_pass": backlog(index, shape), "one_pass_per_gang": one_by_one(index, shape)}
    result["real_server"] = gangs_server.run()
    print(json.dumps(result, indent=1))
    write("gangs", result)
    return result


if __name__ == "__main__":
    main()
