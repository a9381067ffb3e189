"""``python -m bench prefetch``: a burst with workers that pipeline (``--prefetch N``), and the
messages each execution costs.

The workload is ``python -m bench peers``'s Flux part: one server (SQLite), 4 worker processes
with ``--cpus 2 --capacity 2``, a trivial task declaring 1 CPU; a burst of 2,000 from one client
(``map()`` then ``wait_all``), and 200 one at a time (``run(wait=True)``). Each N in
``PREFETCH_VALUES`` gets a fresh cluster per round, warmed with a burst of 200 first (every
worker up and its code cached), and the rounds alternate the order of N (forward, then
backward), so a box that gets busier during the run does not favour one N.

Then the stall (once per round, every worker at the default ``--prefetch``): one worker with one
core runs a body of STALL_LONG_S seconds, and STALL_SHORT bodies of 10 ms wait in its queue (it
has seen no body yet, so its queue takes all of N); then 3 more such workers join. The figure is
how long after they joined the short bodies had all completed, and how many moved
(``flux_requeues_total{reason="moved"}``). Where nothing moves, they wait for the long body.

Messages are the server's own counters (``LifecycleCounters.worker_messages_*``): what it wrote
to its workers and read from them, per execution of the timed part. Over gRPC each message one
side writes is one the other reads, so a worker's reads are the server's writes and its writes
the server's reads.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import write

ROUNDS = int(os.environ.get("PREFETCH_ROUNDS", "3"))
VALUES = tuple(int(v) for v in os.environ.get("PREFETCH_VALUES", "0,1,2,4,8,16").split(","))
BURST = int(os.environ.get("PREFETCH_BURST", "2000"))
SEQUENTIAL = int(os.environ.get("PREFETCH_SEQUENTIAL", "200"))
WARM = 200
WORKERS, CPUS = 4, 2
TASK = Path(__file__).with_name("peers_task.py")
LOGICAL_CPUS = {"FLUX_SIMULATED_CPU_BUSY": "0"}
STALL_LONG_S, STALL_SHORT = 5.0, 16
STALL_TASKS = Path(__file__).with_name("workflows.py")  # holds_a_core: 1 CPU, sleeps its input


def _counts(client: Any) -> tuple[int, int, int, int]:
    c = client.status().counters
    return c.worker_messages_sent, c.worker_messages_received, c.queued_dispatches, c.dispatched


def _per_execution(before: tuple[int, ...], after: tuple[int, ...], executions: int) -> dict[str, float]:
    sent, received, queued, dispatched = (a - b for a, b in zip(after, before, strict=True))
    return {
        "server_sent_per_execution": round(sent / executions, 3),
        "server_received_per_execution": round(received / executions, 3),
        "queued_share": round(queued / dispatched, 3) if dispatched else 0.0,
    }


def one(prefetch: int) -> dict[str, Any]:
    """One fresh cluster with every worker at ``--prefetch prefetch``: its burst and one-at-a-time figures."""
    from flux.client import FluxClient
    from flux.security import Role
    from flux.testing import Cluster, eventually

    cluster = Cluster(Path(tempfile.mkdtemp(prefix=f"prefetch-{prefetch}-")))
    client = None
    try:
        cluster.start_server("--no-http")
        for n in range(WORKERS):
            cluster.start_worker(
                f"w{n}",
                "--cpus",
                str(CPUS),
                "--capacity",
                str(CPUS),
                "--prefetch",
                str(prefetch),
                wait=False,
                env=LOGICAL_CPUS,
            )
        client = FluxClient(cluster.address, credentials=cluster.credentials(Role.CLIENT))
        client.register_file(TASK)
        eventually(lambda: sum(w.connected for w in client.workers().workers) == WORKERS, what="workers")
        warm = list(range(WARM))
        assert [json.loads(e.output_json) for e in client.map("one_cpu", warm, wait=True)] == warm

        inputs = list(range(BURST))
        before = _counts(client)
        began = time.perf_counter()
        accepted = client.map("one_cpu", inputs)
        outputs = [json.loads(e.output_json) for e in client.wait_all(accepted)]
        burst_s = time.perf_counter() - began
        assert outputs == inputs
        burst = {"per_s": round(BURST / burst_s, 1), **_per_execution(before, _counts(client), BURST)}

        before = _counts(client)
        began = time.perf_counter()
        for n in range(SEQUENTIAL):
            assert json.loads(client.run("one_cpu", n, wait=True).output_json) == n
        sequential_s = time.perf_counter() - began
        sequential = {
            "per_s": round(SEQUENTIAL / sequential_s, 1),
            **_per_execution(before, _counts(client), SEQUENTIAL),
        }
        return {"burst": burst, "sequential": sequential}
    finally:
        if client is not None:
            client.close()
        cluster.close()


def stall() -> dict[str, Any]:
    """Short bodies queued behind a long one at one worker, and how soon they ran once others joined."""
    from flux.client import FluxClient
    from flux.security import Role
    from flux.testing import Cluster, eventually
    from flux.v1 import control_pb2

    running = control_pb2.ExecutionState.Value("EXECUTION_STATE_RUNNING")
    completed = control_pb2.ExecutionState.Value("EXECUTION_STATE_COMPLETED")
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="prefetch-stall-")))
    client = None
    one_core = ("--cpus", "1", "--capacity", "1")
    try:
        cluster.start_server("--no-http")
        cluster.start_worker("busy", *one_core, env=LOGICAL_CPUS)
        client = FluxClient(cluster.address, credentials=cluster.credentials(Role.CLIENT))
        client.register_file(STALL_TASKS)
        long = client.run("holds_a_core", STALL_LONG_S).execution_id
        eventually(lambda: client.get(long).state == running, what="the long body running")
        short = [e.execution_id for e in client.map("holds_a_core", [0.01] * STALL_SHORT)]
        for n in range(3):
            cluster.start_worker(f"free{n}", *one_core, wait=False, env=LOGICAL_CPUS)
        eventually(lambda: sum(w.connected for w in client.workers().workers) == 4, what="workers")
        joined = time.perf_counter()
        done = client.wait_all(short)
        short_s = time.perf_counter() - joined
        assert [e.state for e in done] == [completed] * STALL_SHORT
        long_running = client.get(long).state == running
        client.wait_all([long])
        return {
            "short_done_after_join_s": round(short_s, 2),
            "long_still_running_then": long_running,
            "moved": client.status().counters.requeued.get("moved", 0),
        }
    finally:
        if client is not None:
            client.close()
        cluster.close()


def _summary(runs: list[dict[str, Any]], part: str) -> dict[str, Any]:
    rates = [r[part]["per_s"] for r in runs]
    summary: dict[str, Any] = {
        "per_s_median": round(statistics.median(rates), 1),
        "per_s_min": min(rates),
        "per_s_max": max(rates),
        "per_s_runs": rates,
    }
    for key in ("server_sent_per_execution", "server_received_per_execution", "queued_share"):
        summary[key] = round(statistics.median(r[part][key] for r in runs), 3)
    return summary


def main() -> None:
    from bench.timers import speed_s

    speed_before = speed_s()
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in VALUES}
    stalls: list[dict[str, Any]] = []
    for round_ in range(ROUNDS):
        order = VALUES if round_ % 2 == 0 else tuple(reversed(VALUES))
        for prefetch in order:
            result = one(prefetch)
            runs[prefetch].append(result)
            print(f"round {round_ + 1} prefetch {prefetch}: {json.dumps(result)}", flush=True)
        stalls.append(stall())
        print(f"round {round_ + 1} stall: {json.dumps(stalls[-1])}", flush=True)
    write(
        "prefetch",
        {
            "workload": (
                f"{WORKERS} workers x --cpus {CPUS} --capacity {CPUS}, a trivial 1-CPU task; burst of {BURST} "
                f"from one client (map + wait_all) and {SEQUENTIAL} one at a time (run(wait=True)); SQLite"
            ),
            "rounds": ROUNDS,
            # The box's speed (seconds for 10**7 Python additions) before and after the run.
            "speed_s_10e7_additions": [speed_before, speed_s()],
            "stall": {
                "workload": (
                    f"one worker --cpus 1 --capacity 1 running a {STALL_LONG_S:g} s body, {STALL_SHORT} bodies "
                    "of 10 ms queued behind it, then 3 more such workers; default --prefetch"
                ),
                "short_done_after_join_s_median": statistics.median(
                    r["short_done_after_join_s"] for r in stalls
                ),
                "runs": stalls,
            },
            "by_prefetch": {
                str(n): {"burst": _summary(runs[n], "burst"), "sequential": _summary(runs[n], "sequential")}
                for n in VALUES
            },
        },
    )
