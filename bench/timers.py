"""``python -m bench timers``: the dispatcher's one timer structure (flux/dispatcher/state/deadlines.py).

100,000 timers of mixed kinds (ack, retry, timeout, heartbeat, pending, stop), armed in a shuffled
order with deadlines spread over ``BENCH_TIMERS_SPAN`` seconds, fired by the structure's own
``call_later`` wake-up on a real asyncio loop. Reported: the firing lateness (when the handler ran,
minus the deadline) p50/p99 (target p99 <= 50 ms), the time to arm them all, the loop's longest
pause (a 1 ms ticker beside it), and the memory per armed timer (tracemalloc).

The end-to-end part (``end_to_end``; ``BENCH_TIMERS_E2E=0`` skips it) runs the same timers in real
servers: ``BENCH_TIMERS_E2E`` (2,000) executions of ``overruns`` (bench/timers_workflows.py:
timeout 1 s, one attempt, a 30 s body) on real worker processes over loopback. Each one must end
FAILED with reason ``timeout``; its lateness is its stored attempt's end minus (its start + 1 s),
both written by the server: the timer's firing, the Stop to the worker, the body cancelled and the
attempt handed back. Reported p50/p99/max and how many fired (all, or the bench says which not).

- ``sqlite``: one server, four workers of capacity 600, the executions submitted over
  ``BENCH_TIMERS_E2E_SPREAD`` seconds (10), a bulk call every 0.25 s.
- ``sqlite_burst``: the same, all submitted in one bulk call: their timeouts come due within a
  second or two of each other, about 500 stops at once on each worker.
- ``postgres_2_replicas``: two replicas on a throwaway PostgreSQL, two workers homed on each (each
  worker lists both replicas, its own first), the executions submitted to the replicas in turn
  over the same spread; half way the second replica is SIGKILLed and the
  rest go to the survivor. ``held_by_killed`` are the executions the killed replica's workers held
  (SCHEDULED or RUNNING in the store) as it was killed: their timers were the dead replica's, and
  the survivor fired them after taking the workers over. ``others`` is everything else.

``ended_by_stop_grace`` counts the stops a worker never answered: the server ended those attempts
when ``--preemption-grace`` (30 s) ran out, so their lateness is about 30 s.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.common import percentiles, speed_s, write
from flux.client import FluxClient
from flux.dispatcher.state.deadlines import Kind, Timers
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

COUNT = int(os.environ.get("BENCH_TIMERS", "100000"))
SPAN = float(os.environ.get("BENCH_TIMERS_SPAN", "5"))
E2E = int(os.environ.get("BENCH_TIMERS_E2E", "2000"))
E2E_SPREAD = float(os.environ.get("BENCH_TIMERS_E2E_SPREAD", "10"))
WORKFLOWS = Path(__file__).with_name("timers_workflows.py")
TIMEOUT_MS = 1000  # overruns' timeout
CAPACITY = 600  # per worker: four of them run every execution at once
FAILED = control_pb2.EXECUTION_STATE_FAILED
FINAL_STATES = "(4, 5, 6)"


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


# ----------------------------------------------------------------- end to end


def _final(cluster: Cluster, ids: Sequence[str], timeout: float) -> int:
    """Wait (bounded) until every execution of the run is final, from the store; how many are."""
    marks = ",".join("?" * len(ids))
    query = f"SELECT COUNT(*) FROM executions WHERE state IN {FINAL_STATES} AND execution_id IN ({marks})"
    deadline, done = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        done = cluster.query(query, *ids)[0][0]
        if done >= len(ids):
            break
        time.sleep(0.25)
    return done


def _outcomes(cluster: Cluster, ids: Sequence[str]) -> list[control_pb2.Execution]:
    return [cluster.client.get(i) for i in ids]


def _lateness(executions: Sequence[control_pb2.Execution]) -> dict[str, object]:
    """How many fired (FAILED, reason timeout, one attempt ended by it) and their lateness in ms."""
    late, missed = [], []
    for execution in executions:
        attempt = execution.attempts[-1] if execution.attempts else None
        if (
            execution.state != FAILED
            or execution.reason != "timeout"
            or attempt is None
            or attempt.reason != "timeout"
        ):
            missed.append(execution)
            continue
        late.append((attempt.ended_at_ms - attempt.started_at_ms - TIMEOUT_MS) / 1000)
    result: dict[str, object] = {
        "executions": len(executions),
        "fired": len(late),
        "lateness_ms": percentiles(late),
    }
    if missed:
        outcomes: dict[str, int] = {}
        for execution in missed:
            key = f"{control_pb2.ExecutionState.Name(execution.state)}/{execution.reason or '-'}"
            outcomes[key] = outcomes.get(key, 0) + 1
        result["not_fired"] = outcomes
    return result


def _submit_spread(
    clients: Sequence[FluxClient], count: int, spread: float, kill: Callable[[], None] | None = None
) -> list[str]:
    """``count`` executions over ``spread`` seconds, a ``map`` call every 0.25 s to the clients in
    turn (all in one call when ``spread`` is 0); half way ``kill`` runs, and the rest go to the first."""
    if spread <= 0:
        return [e.execution_id for e in clients[0].map("overruns", range(count))]
    steps = max(2, int(spread / 0.25))
    per_step = -(-count // steps)
    ids: list[str] = []
    started, killed = time.monotonic(), False
    for step in range(steps):
        if kill is not None and not killed and step >= steps // 2:
            kill()
            killed = True
        n = min(per_step, count - len(ids))
        if n <= 0:
            break
        client = clients[0] if killed else clients[step % len(clients)]
        ids += [e.execution_id for e in client.map("overruns", range(len(ids), len(ids) + n))]
        time.sleep(max(0.0, started + (step + 1) * spread / steps - time.monotonic()))
    return ids


def sqlite_run(count: int = E2E, spread: float = E2E_SPREAD) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="flux-bench-timers-") as tmp:
        cluster = Cluster(Path(tmp), "grpc")
        try:
            cluster.start_server("--no-http")
            cluster.register(WORKFLOWS)
            for name in ("w1", "w2", "w3", "w4"):
                cluster.start_worker(name, "--capacity", str(CAPACITY))
            started = time.monotonic()
            ids = _submit_spread([cluster.client], count, spread)
            submitted = time.monotonic() - started
            _final(cluster, ids, timeout=60 + count / 50)
            elapsed = time.monotonic() - started
            result = _lateness(_outcomes(cluster, ids))
            stops_expired = _count_lines(Path(tmp) / "server.log", "not handed back by")
        finally:
            cluster.close()
    return {
        "store": "sqlite",
        "workers": 4,
        "capacity_per_worker": CAPACITY,
        "timeout_ms": TIMEOUT_MS,
        "spread_seconds": spread,
        "submit_seconds": round(submitted, 2),
        "seconds_to_all_final": round(elapsed, 2),
        **result,
        # Stops whose attempt the worker never handed back: ended by the stop grace (30 s) instead.
        "ended_by_stop_grace": stops_expired,
    }


def _count_lines(log: Path, text: str) -> int:
    return sum(text in line for line in log.read_text(errors="replace").splitlines()) if log.exists() else 0


def replicas_run(count: int = E2E, spread: float = E2E_SPREAD) -> dict[str, object]:
    from flux.testing.postgres import TemporaryPostgres

    with (
        TemporaryPostgres(durable=True) as postgres,
        tempfile.TemporaryDirectory(prefix="flux-bench-timers-pg-") as tmp,
    ):
        cluster = Cluster(Path(tmp), "grpc", db=postgres.database())
        clients = []
        try:
            servers = [cluster.start_server("--no-http"), cluster.start_replica("--no-http")]
            cluster.register(WORKFLOWS)
            homes = {"a1": 0, "a2": 0, "b1": 1, "b2": 1}
            for name, home in homes.items():
                cluster.start_worker(
                    name, "--capacity", str(CAPACITY), servers=[servers[home], servers[1 - home]]
                )
            clients = [cluster.client_for(s) for s in servers]
            eventually(lambda: all(
                {w.name for w in c.workers().workers if w.connected} == set(homes) for c in clients
            ), timeout=30, what="every worker listed by both replicas")  # fmt: skip
            killed_at_ms = 0
            held_ids: set[str] = set()

            def kill() -> None:
                nonlocal killed_at_ms
                victim = cluster.replicas[0][0]
                # What the victim's workers hold (dispatched or running) as it dies, from the store.
                homed = [name for name, home in homes.items() if home == 1]
                held_ids.update(
                    row[0]
                    for row in cluster.query(
                        "SELECT execution_id FROM executions WHERE state IN (2, 3) AND worker IN (?, ?)",
                        *homed,
                    )
                )
                killed_at_ms = int(time.time() * 1000)
                victim.send_signal(signal.SIGKILL)
                victim.wait(timeout=10)

            started = time.monotonic()
            ids = _submit_spread(clients, count, spread, kill)
            _final(cluster, ids, timeout=120)
            elapsed = time.monotonic() - started
            executions = _outcomes(cluster, ids)
            stops_expired = sum(_count_lines(log, "not handed back by") for log in Path(tmp).glob("*.log"))
        finally:
            for c in clients:
                c.close()
            cluster.close()

    held = [e for e in executions if e.execution_id in held_ids]
    others = [e for e in executions if e.execution_id not in held_ids]
    every = _lateness(executions)
    return {
        "store": "postgresql",
        "replicas": 2,
        "workers": 4,
        "capacity_per_worker": CAPACITY,
        "timeout_ms": TIMEOUT_MS,
        "spread_seconds": spread,
        "killed": "replica 2 (SIGKILL), half way through the submissions",
        "seconds_to_all_final": round(elapsed, 2),
        "executions": every["executions"],
        "fired": every["fired"],
        **({"not_fired": every["not_fired"]} if "not_fired" in every else {}),
        "ended_by_stop_grace": stops_expired,
        "held_by_killed": {
            **_lateness(held),
            # When their timeouts came due, counted from the kill (negative: already due at the kill).
            "due_after_kill_ms": percentiles(
                [
                    (e.attempts[-1].started_at_ms + TIMEOUT_MS - killed_at_ms) / 1000
                    for e in held
                    if e.attempts
                ]
            ),
        },
        "others": _lateness(others),
    }


def end_to_end(count: int = E2E) -> dict[str, object]:
    return {
        "sqlite": sqlite_run(count),
        "sqlite_burst": sqlite_run(count, spread=0),
        "postgres_2_replicas": replicas_run(count),
    }


def main() -> None:
    result: dict[str, object] = {"speed_s_10e7_additions": speed_s(), "in_process": asyncio.run(_run())}
    if E2E:
        result["end_to_end"] = end_to_end(E2E)
    write("timers", result)


if __name__ == "__main__":
    main()
