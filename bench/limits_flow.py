"""``python -m bench limits-flow``: flow control in the pure matching core (flux/matching/flow.py).

- ``placements``: a steady state of one keyed workflow (``Concurrency(max=1, key=...)``) with
  ``PENDING`` executions waiting over 10 keys, then over 100,000 keys: each step ``BATCH`` (10,
  so that 10 keys of max 1 keep as many running as 100,000 keys)
  executions end (one batch of completions), each key's next is admitted
  (``FlowControl.release``) and queued, one ``schedule`` pass (scoped to the shape, as the
  dispatcher's passes are) places them, and each is marked placed.
  Reported: placements per second for each, and their ratio (target >= 20,000/s at 100,000 keys,
  ratio <= 1.5).
- ``rate``: a ``RateLimit`` of ``BENCH_RATE`` per second driven on a simulated clock for
  ``BENCH_RATE_WINDOW`` seconds with a backlog always waiting: the starts per window, against the
  limit (target within 1 %). A simulated clock, so this measures the bucket's arithmetic and the
  wake-ups it asks for, not a server's timer lateness.
- ``fairness``: one budget (max ``MAX``), key "big" with 10,000 queued then key "small" with 10:
  how many slots freed before all of "small" started (target <= 2 x MAX).
"""

from __future__ import annotations

import os
import time

from bench.common import write
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.matching import FeasibilityCache, PendingQueue, Shape, WorkerView, schedule
from flux.matching.flow import FlowControl, Gate

PENDING = int(os.environ.get("BENCH_FLOW_PENDING", "200000"))
STEPS = int(os.environ.get("BENCH_FLOW_STEPS", "50000"))
RATE = float(os.environ.get("BENCH_RATE", "100"))
WINDOW = float(os.environ.get("BENCH_RATE_WINDOW", "60"))
MAX = 10
# Executions ending between two passes (the dispatcher gathers a batch of completions into one pass).
BATCH = int(os.environ.get("BENCH_FLOW_BATCH", "10"))
GiB = 1024**3


def _workers(n: int = 16) -> list[WorkerView]:
    resources = WorkerResources(
        cpu_total=1024, cpu_available=1024, memory_total=1024 * GiB, memory_available=1024 * GiB,
        disk_total=1024 * GiB, disk_free=1024 * GiB,
    )  # fmt: skip
    return [WorkerView(f"w{i}", resources, {}, WorkerSoftware(), capacity=10**9) for i in range(n)]


def placements(keys: int) -> dict[str, object]:
    flow, queue, cache, workers = FlowControl(), PendingQueue(), FeasibilityCache(), _workers()
    shape = Shape(ResourceRequest())  # capacity alone bounds it: every admitted one fits
    gates = [(Gate(f"c/wf/{k}", f"key customer={k}", max=1),) for k in range(keys)]
    running: list[str] = []
    seq = 0
    for i in range(PENDING):
        k = i % keys
        if flow.admit(str(i), gates[k], str(k), 0, 0.0):
            seq += 1
            queue.add(str(i), shape, seq)
    for placement in schedule(queue, workers, shapes=[shape], cache=cache):
        queue.remove(placement.execution_id)
        running.append(placement.execution_id)
    placed = 0
    started = time.perf_counter()
    for first in range(0, STEPS, BATCH):
        for done in running[first : first + BATCH]:
            for admitted in flow.release(done, 0.0):
                seq += 1
                queue.add(admitted, shape, seq)
        for placement in schedule(queue, workers, shapes=[shape], cache=cache):
            queue.remove(placement.execution_id)
            flow.placed(placement.execution_id, 0.0)
            running.append(placement.execution_id)
            placed += 1
    seconds = time.perf_counter() - started
    assert placed == STEPS, (placed, STEPS)
    return {"keys": keys, "pending": PENDING, "placements": placed, "per_second": round(placed / seconds)}


def rate_accuracy() -> dict[str, object]:
    flow = FlowControl()
    gate = Gate("r/wf/", "rate limit wf", rate=RATE, burst=1)
    starts: list[float] = []
    now, n = 0.0, 0
    # A backlog always waits; the clock jumps to each wake-up the budget asks for.
    for _ in range(10):
        n += 1
        if flow.admit(str(n), (gate,), "", 0, now):
            starts.append(now)
            flow.placed(str(n), now)
    while now < 3 * WINDOW:
        now = flow.wakeups.get(gate.budget, now + 1.0 / RATE)
        for admitted in flow.refill(gate.budget, now):
            starts.append(now)
            flow.placed(admitted, now)
            n += 1
            flow.admit(str(n), (gate,), "", 0, now)
    windows = [sum(1 for s in starts if w * WINDOW <= s < (w + 1) * WINDOW) for w in range(3)]
    expected = RATE * WINDOW
    worst = max(abs(c - expected) / expected for c in windows)
    return {
        "rate_per_s": RATE,
        "window_s": WINDOW,
        "starts_per_window": windows,
        "worst_error": round(worst, 5),
    }


def fairness() -> dict[str, object]:
    flow = FlowControl()
    gate = Gate("c/wf/", "workflow wf", max=MAX)
    running = [f"big{i}" for i in range(10_000) if flow.admit(f"big{i}", (gate,), "big", 0, 0.0)]
    running += [f"small{i}" for i in range(10) if flow.admit(f"small{i}", (gate,), "small", 0, 0.0)]
    small, freed = 0, 0
    while small < 10:
        freed += 1
        admitted = flow.release(running.pop(0), 0.0)
        running += admitted
        small += sum(1 for e in admitted if e.startswith("small"))
    return {"max": MAX, "slots_freed_until_small_all_started": freed, "target": 2 * MAX}


def main() -> dict[str, object]:
    few, many = placements(10), placements(100_000)
    ratio = few["per_second"] / many["per_second"]  # type: ignore[operator]
    result = {
        "placements": {"10_keys": few, "100000_keys": many, "ratio_10_to_100000": round(ratio, 3)},
        "rate": rate_accuracy(),
        "fairness": fairness(),
    }
    write("limits_flow", result)
    print(result)
    return result


if __name__ == "__main__":
    main()
