"""``python -m bench peers``: Flux, Ray and Dask side by side on one trivial workload.

The workload is the one a user comparing the three would write first: 4 workers with
2 CPUs each, a task that returns its input and declares 1 CPU (Flux:
``ResourceRequest(cpu=1)``, Ray: ``@ray.remote(num_cpus=1)``, Dask:
``resources={"CPU": 1}``), each system's fastest client path (Flux: ``run(wait=True)``
and ``map()`` + ``wait_all``; Ray: ``.remote`` + ``ray.get``; Dask: ``client.submit`` /
``client.map`` + ``gather``). Figures:

- cold start: from nothing running to the first result (servers, workers, the first task);
- sequential: SEQUENTIAL tasks one after the other, each submitted once the last returned
  (latency percentiles and tasks per second);
- burst: BURST tasks submitted at once from one client and waited for (completed per
  second, and when the submit call returned);
- RSS: the resident memory of every process of the system after the burst, client included.

Each system runs in a fresh Python process of its own (``python -m bench.peers SYSTEM``)
and is started from nothing there; the rounds interleave the systems (flux, ray, dask,
flux, …) so a slow spell of the machine falls on all of them. The summary is the median
of the rounds. Caveats, also written into the result: Flux commits every execution to
SQLite before it answers (Ray and Dask hold tasks in memory only); Ray runs one node with
8 CPUs (its raylet starts the worker processes), Dask a LocalCluster of 4 worker
processes with 2 threads and {"CPU": 2} each, Flux a server and 4 worker processes.

Ray and Dask come from the ``peers`` extra (``pip install -e '.[peers]'``); a system
that is not installed is skipped with a message.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench.common import percentiles, write

SYSTEMS = ("flux", "ray", "dask")
ROUNDS = int(os.environ.get("PEERS_ROUNDS", "3"))
SEQUENTIAL = int(os.environ.get("PEERS_SEQUENTIAL", "200"))
BURST = int(os.environ.get("PEERS_BURST", "2000"))
WORKERS, CPUS = 4, 2
TASK = Path(__file__).with_name("peers_task.py")
CAVEATS = [
    "Flux commits every execution to SQLite before it answers; Ray and Dask keep tasks in memory only.",
    f"Flux: one server and {WORKERS} worker processes with --cpus {CPUS}; Ray: one node with "
    f"num_cpus={WORKERS * CPUS} (its raylet starts the workers); Dask: a LocalCluster of {WORKERS} worker "
    f"processes, {CPUS} threads and resources {{'CPU': {CPUS}}} each.",
    "RSS counts every process of the system after the burst, the client's own process included.",
    "CPUs are logical for all three: Flux's workers run with FLUX_SIMULATED_CPU_BUSY=0 (as Ray's num_cpus "
    "and Dask's resources, they do not also subtract the machine's observed load; four workers on "
    "two cores would otherwise each see the others' load and hold back).",
]
# Flux workers count no foreign load (docs/concepts/resources.md): the others' CPUs are logical too.
LOGICAL_CPUS = {"FLUX_SIMULATED_CPU_BUSY": "0"}


def _tree_rss(root: psutil.Process) -> int:
    total = 0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            total += process.memory_info().rss
    return total


def _measure(
    start: Callable[[], Callable[[int], Any]],
    run_many: Callable[[list[int]], list[Any]],
    submit_many: Callable[[list[int]], Callable[[], list[Any]]],
) -> dict[str, object]:
    """The figures of one system in this process: ``start`` brings it up and answers its run-one."""
    began = time.perf_counter()
    run_one = start()
    assert run_one(0) == 0
    cold = time.perf_counter() - began
    assert run_many([1, 2, 3]) == [1, 2, 3]  # every worker up and warm before the timed parts
    latencies = []
    sequential_began = time.perf_counter()
    for n in range(SEQUENTIAL):
        t0 = time.perf_counter()
        assert run_one(n) == n
        latencies.append(time.perf_counter() - t0)
    sequential = time.perf_counter() - sequential_began
    inputs = list(range(BURST))
    burst_began = time.perf_counter()
    gather = submit_many(inputs)
    submitted = time.perf_counter() - burst_began
    assert gather() == inputs
    burst = time.perf_counter() - burst_began
    return {
        "cold_start_s": round(cold, 3),
        "sequential_per_s": round(SEQUENTIAL / sequential, 1),
        "sequential_ms": percentiles(latencies),
        "burst_per_s": round(BURST / burst, 1),
        "burst_submit_returned_s": round(submitted, 3),
        "rss_mb": round(_tree_rss(psutil.Process()) / 1e6, 1),
    }


def flux() -> dict[str, object]:
    from flux.client import FluxClient
    from flux.security import Role
    from flux.testing import Cluster

    workdir = Path(tempfile.mkdtemp(prefix="peers-flux-"))
    cluster = Cluster(workdir)
    holder: dict[str, FluxClient] = {}

    def start() -> Callable[[int], Any]:
        cluster.start_server("--no-http")
        for n in range(WORKERS):
            cluster.start_worker(
                f"w{n}", "--cpus", str(CPUS), "--capacity", str(CPUS), wait=False, env=LOGICAL_CPUS
            )
        client = holder["client"] = FluxClient(cluster.address, credentials=cluster.credentials(Role.CLIENT))
        client.register_file(TASK)

        def run_one(value: int) -> Any:
            return json.loads(client.run("one_cpu", value, wait=True).output_json)

        return run_one

    def run_many(inputs: list[int]) -> list[Any]:
        return [json.loads(e.output_json) for e in holder["client"].map("one_cpu", inputs, wait=True)]

    def submit_many(inputs: list[int]) -> Callable[[], list[Any]]:
        client = holder["client"]
        accepted = client.map("one_cpu", inputs)
        return lambda: [json.loads(e.output_json) for e in client.wait_all(accepted)]

    try:
        return _measure(start, run_many, submit_many)
    finally:
        if "client" in holder:
            holder["client"].close()
        cluster.close()


def ray() -> dict[str, object]:
    import ray as ray_module

    @ray_module.remote(num_cpus=1)
    def one_cpu(value: int) -> int:
        return value

    def start() -> Callable[[int], Any]:
        ray_module.init(
            num_cpus=WORKERS * CPUS, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
        return lambda value: ray_module.get(one_cpu.remote(value))

    def run_many(inputs: list[int]) -> list[Any]:
        return ray_module.get([one_cpu.remote(v) for v in inputs])

    def submit_many(inputs: list[int]) -> Callable[[], list[Any]]:
        refs = [one_cpu.remote(v) for v in inputs]
        return lambda: ray_module.get(refs)

    try:
        return _measure(start, run_many, submit_many)
    finally:
        ray_module.shutdown()


def dask() -> dict[str, object]:
    from dask.distributed import Client, LocalCluster

    holder: dict[str, Any] = {}

    def one_cpu(value: int) -> int:
        return value

    def start() -> Callable[[int], Any]:
        cluster = holder["cluster"] = LocalCluster(
            n_workers=WORKERS,
            threads_per_worker=CPUS,
            processes=True,
            resources={"CPU": CPUS},
            dashboard_address=None,
        )
        client = holder["client"] = Client(cluster)
        return lambda value: client.submit(one_cpu, value, resources={"CPU": 1}, pure=False).result()

    def run_many(inputs: list[int]) -> list[Any]:
        client = holder["client"]
        return client.gather(client.map(one_cpu, inputs, resources={"CPU": 1}, pure=False))

    def submit_many(inputs: list[int]) -> Callable[[], list[Any]]:
        client = holder["client"]
        futures = client.map(one_cpu, inputs, resources={"CPU": 1}, pure=False)
        return lambda: client.gather(futures)

    try:
        return _measure(start, run_many, submit_many)
    finally:
        if "client" in holder:
            holder["client"].close()
            holder["cluster"].close()


RUNNERS = {"flux": flux, "ray": ray, "dask": dask}
MODULES = {"flux": "flux", "ray": "ray", "dask": "distributed"}


def _round(system: str) -> dict[str, object]:
    """One system's figures, from a fresh Python process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.peers", system],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
    )
    if done.returncode != 0:
        raise RuntimeError(f"{system} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(rounds: list[dict[str, Any]], key: str, inner: str | None = None) -> float:
    values = [r[key][inner] if inner else r[key] for r in rounds]
    return round(statistics.median(values), 3)


def main() -> None:
    systems = [s for s in SYSTEMS if importlib.util.find_spec(MODULES[s]) is not None]
    skipped = sorted(set(SYSTEMS) - set(systems))
    for system in skipped:
        print(f"{system} is not installed: skipped (pip install -e '.[peers]' adds Ray and Dask)")
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for n in range(ROUNDS):
        for system in systems:
            rounds[system].append(_round(system))
            print(f"round {n + 1} {system}: {json.dumps(rounds[system][-1])}", file=sys.stderr)
    summary = {
        system: {
            "sequential_per_s": _median(results, "sequential_per_s"),
            "sequential_p50_ms": _median(results, "sequential_ms", "p50"),
            "sequential_p99_ms": _median(results, "sequential_ms", "p99"),
            "burst_per_s": _median(results, "burst_per_s"),
            "burst_submit_returned_s": _median(results, "burst_submit_returned_s"),
            "cold_start_s": _median(results, "cold_start_s"),
            "rss_mb": _median(results, "rss_mb"),
        }
        for system, results in rounds.items()
    }
    write(
        "peers",
        {
            "workload": {
                "workers": WORKERS,
                "cpus_per_worker": CPUS,
                "task_cpus": 1,
                "sequential": SEQUENTIAL,
                "burst": BURST,
                "rounds": ROUNDS,
            },  # fmt: skip
            "caveats": CAVEATS,
            "skipped": skipped,
            "summary": summary,
            "rounds": rounds,
        },
    )


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in RUNNERS:
        print(json.dumps(RUNNERS[sys.argv[1]]()))
    else:
        main()
