"""``python -m bench timers``: the dispatcher's one timer structure (flux/dispatcher/state/deadlines.py).

100,000 timers of mixed kinds (ack, retry, timeout, heartbeat, pending, stop), armed in a shuffled
order with deadlines spread over ``BENCH_TIMERS_SPAN`` seconds, fired by the structure's own
``call_later`` wake-up on a real asyncio loop. Reported: the firing lateness (when the handler ran,
minus the deadline) p50/p99 (target p99 <= 50 ms), the time to arm them all, the loop's longest
pause (a 1 ms ticker beside it), and the memory per armed timer (tracemalloc).

In process and without a store: this measures the structure and its wake-ups, not a server
(the SQLite and two-replica runs the issue asks for are not here yet).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import tracemalloc

from bench.common import percentiles, write
from flux.dispatcher.state.deadlines import Kind, Timers

COUNT = int(os.environ.get("BENCH_TIMERS", "100000"))
SPAN = float(os.environ.get("BENCH_TIMERS_SPAN", "5"))


async def _run() -> dict[str, object]:
    clock = time.time
    timers = Timers(clock)
    kinds = list(Kind)
    rng = random.Random(42)
    offsets = [rng.random() * SPAN for _ in range(COUNT)]
    dues = offsets
    late: list[float] = []
    fired = asyncio.get_running_loop().create_future()

    def on_due(now: float) -> None:
        for _, execution_id, _ in timers.due(now):
            late.append(clock() - dues[int(execution_id)])
        if len(late) >= COUNT and not fired.done():
            fired.set_result(None)

    timers.on_due = on_due
    ids = [str(i) for i in range(COUNT)]
    order = rng.sample(range(COUNT), COUNT)
    grown = _bytes_armed(kinds, ids, offsets, order)
    start = clock() + 2.0  # every timer is armed before the first comes due
    dues = [start + offset for offset in offsets]
    armed_at = time.perf_counter()
    for i in order:
        timers.arm(kinds[i % len(kinds)], ids[i], i, dues[i])
    arm_seconds = time.perf_counter() - armed_at

    longest = 0.0

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not fired.done():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.wait_for(fired, SPAN + 60)
    await tick
    return {
        "timers": COUNT,
        "span_s": SPAN,
        "lateness_ms": percentiles(late),
        "arm_all_ms": round(arm_seconds * 1000, 1),
        "arm_us_per_timer": round(arm_seconds / COUNT * 1e6, 2),
        "loop_longest_pause_ms": round(longest * 1000, 2),
        "bytes_per_timer": round(grown / COUNT, 1),
        "target_p99_ms": 50,
    }


def _bytes_armed(kinds: list[Kind], ids: list[str], dues: list[float], order: list[int]) -> int:
    """What arming every timer allocates (ids exist already, as an execution's id does), in a
    structure of its own: tracemalloc slows every allocation, so the timed run goes without it."""
    timers = Timers(time.time)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in order:
        timers.arm(kinds[i % len(kinds)], ids[i], i, dues[i])
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    timers.close()
    return sum(s.size_diff for s in after.compare_to(before, "filename"))


def main() -> None:
    write("timers", asyncio.run(_run()))


if __name__ == "__main__":
    main()
