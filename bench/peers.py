"""``python -m bench peers``: Flux, Ray and Dask side by side on one trivial workload.

The workload is the one a user comparing the three would write first: 4 workers with
2 CPUs each, a task that returns its input and declares 1 CPU (Flux:
``ResourceRequest(cpu=1)``, Ray: ``@ray.remote(num_cpus=1)``, Dask:
``resources={"CPU": 1}``), each system's fastest client path (Flux: ``run(wait=True)``
and ``map()`` + ``wait_all``; Ray: ``.remote`` + ``ray.get``; Dask: ``client.submit`` /
``client.map`` + ``gather``). Figures:

- cold start: from nothing running to the first result (servers, workers, the first task);
- warm-up (not timed): a burst of WARM tasks and WARM_SEQUENTIAL one at a time, the same for
  every system, enough for all of its worker processes to be up (Ray starts its workers lazily:
  warmed with 3 tasks, its burst came to less than half of what it does warm);
- sequential: SEQUENTIAL tasks one after the other, each submitted once the last returned
  (latency percentiles and tasks per second), and as many again each waited with a timeout
  (Flux ``run(wait=True, timeout=...)``, Ray ``ray.get(ref, timeout=...)``, Dask
  ``future.result(timeout=...)``), in alternating blocks of BLOCK so a slow spell falls on both;
- burst: BURST tasks submitted at once from one client and waited for (completed per
  second, and when the submit call returned);
- RSS and PSS: the resident memory of every process of the system after the burst, client
  included (PSS shares each shared page out between the processes that map it).

The box's speed (seconds for 10**7 pure-Python additions, ``speed_s``) is taken in each
system's process before it starts, beside every run's figures: the figures move with it, and the
docs keep one table per speed class (``speed_class``: fast below FAST_BELOW_S, else slow).
Beside it, the loopback round trip between two processes (``round_trip_us``): boxes of one
speed class have differed by 1.8x in sequential runs per second, and that figure shows why.

Each system runs in a fresh Python process of its own (``python -m bench.peers SYSTEM``)
and is started from nothing there; the rounds interleave the systems (flux, ray, dask,
flux, …) so a slow spell of the machine falls on all of them. The summary is the median
of the rounds. Caveats, also written into the result: Flux commits every execution to
SQLite before it answers (Ray and Dask hold tasks in memory only); Ray runs one node with
8 CPUs (its raylet starts the worker processes), Dask a LocalCluster of 4 worker
processes with 2 threads and {"CPU": 2} each, Flux a server and 4 worker processes.

Ray and Dask come from the ``peers`` extra (``pip install -e '.[peers]'``, or a venv of their own
with this tree installed in it); a system that is not installed is skipped with a message, and
the run goes on with the others.
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

from bench.common import percentiles, round_trip_us, speed_s, write

SYSTEMS = ("flux", "ray", "dask")
ROUNDS = int(os.environ.get("PEERS_ROUNDS", "3"))
SEQUENTIAL = int(os.environ.get("PEERS_SEQUENTIAL", "200"))
BURST = int(os.environ.get("PEERS_BURST", "2000"))
WARM = int(os.environ.get("PEERS_WARM", "200"))
WARM_SEQUENTIAL = 20
BLOCK = 50
# A wait's timeout in the sequential runs that take one: far above any run, it never fires.
WAIT_TIMEOUT_S = 30.0
# Seconds for 10**7 additions below which a run is of the fast class (docs/benchmarks.md).
FAST_BELOW_S = 1.2
WORKERS, CPUS = 4, 2
TASK = Path(__file__).with_name("peers_task.py")
CAVEATS = [
    "Flux commits every execution to SQLite before it answers; Ray and Dask keep tasks in memory only.",
    f"Flux: one server and {WORKERS} worker processes with --cpus {CPUS}; Ray: one node with "
    f"num_cpus={WORKERS * CPUS} (its raylet starts the workers); Dask: a LocalCluster of {WORKERS} worker "
    f"processes, {CPUS} threads and resources {{'CPU': {CPUS}}} each.",
    "RSS counts every process of the system after the burst, the client's own process included.",
    "Every system starts from byte-compiled code, as a pip install leaves it: Flux's own package is "
    "compiled before its run (outside the timing) where its checkout has no bytecode yet, since with "
    "PYTHONDONTWRITEBYTECODE set (this box sets it) an editable checkout is compiled from source in "
    "every process, which cost its cold start about 0.15 s of the server's 0.4 s.",
    "CPUs are logical for all three: Flux's workers run with FLUX_SIMULATED_CPU_BUSY=0 (as Ray's num_cpus "
    "and Dask's resources, they do not also subtract the machine's observed load; four workers on "
    "two cores would otherwise each see the others' load and hold back).",
]
# Flux workers count no foreign load (docs/concepts/resources.md): the others' CPUs are logical too.
LOGICAL_CPUS = {"FLUX_SIMULATED_CPU_BUSY": "0"}


def _tree_memory(root: psutil.Process) -> tuple[int, int]:
    """RSS and PSS summed over ``root`` and every process below it."""
    rss = pss = 0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            info = process.memory_full_info()
            rss, pss = rss + info.rss, pss + getattr(info, "pss", info.rss)
    return rss, pss


# A system's run-one: the input, and the wait's timeout (None: none).
RunOne = Callable[[int, float | None], Any]


def _sequential(run_one: RunOne) -> dict[str, list[float]]:
    """SEQUENTIAL runs without a timeout and SEQUENTIAL with one, in alternating blocks."""
    latencies: dict[str, list[float]] = {"plain": [], "timeout": []}
    n = 0
    while len(latencies["timeout"]) < SEQUENTIAL:
        for kind, timeout in (("plain", None), ("timeout", WAIT_TIMEOUT_S)):
            for _ in range(min(BLOCK, SEQUENTIAL - len(latencies[kind]))):
                t0 = time.perf_counter()
                assert run_one(n, timeout) == n
                latencies[kind].append(time.perf_counter() - t0)
                n += 1
    return latencies


def _measure(
    start: Callable[[], RunOne],
    run_many: Callable[[list[int]], list[Any]],
    submit_many: Callable[[list[int]], Callable[[], list[Any]]],
) -> dict[str, object]:
    """The figures of one system in this process: ``start`` brings it up and answers its run-one."""
    speed = speed_s()  # before anything of the system runs
    trip = round_trip_us()
    began = time.perf_counter()
    run_one = start()
    assert run_one(0, None) == 0
    cold = time.perf_counter() - began
    # Every system warmed the same way before the timed parts: a burst (all worker processes up)
    # and a few runs one at a time (a client's call or connection opened).
    assert run_many(list(range(WARM))) == list(range(WARM))
    for n in range(WARM_SEQUENTIAL):
        assert run_one(n, None) == n and run_one(n, WAIT_TIMEOUT_S) == n
    latencies = _sequential(run_one)
    inputs = list(range(BURST))
    burst_began = time.perf_counter()
    gather = submit_many(inputs)
    submitted = time.perf_counter() - burst_began
    assert gather() == inputs
    burst = time.perf_counter() - burst_began
    rss, pss = _tree_memory(psutil.Process())
    return {
        "speed_s": speed,
        "speed_class": "fast" if speed < FAST_BELOW_S else "slow",
        "round_trip_us": trip,
        "cold_start_s": round(cold, 3),
        "sequential_per_s": round(SEQUENTIAL / sum(latencies["plain"]), 1),
        "sequential_ms": percentiles(latencies["plain"]),
        "sequential_timeout_per_s": round(SEQUENTIAL / sum(latencies["timeout"]), 1),
        "sequential_timeout_ms": percentiles(latencies["timeout"]),
        "burst_per_s": round(BURST / burst, 1),
        "burst_submit_returned_s": round(submitted, 3),
        "rss_mb": round(rss / 1e6, 1),
        "pss_mb": round(pss / 1e6, 1),
    }


def _byte_compiled(package: str) -> None:
    """Write ``package``'s bytecode where it is missing or stale (``compileall`` writes it even under
    PYTHONDONTWRITEBYTECODE). Ray and Dask come from site-packages, compiled when pip installed
    them; an editable Flux checkout is not, and would be compiled from source in every process."""
    import compileall
    import importlib

    root = Path(importlib.import_module(package).__file__ or "").parent
    compileall.compile_dir(root, quiet=1)


def flux() -> dict[str, object]:
    from flux.client import FluxClient
    from flux.security import Role
    from flux.testing import Cluster

    _byte_compiled("flux")

    workdir = Path(tempfile.mkdtemp(prefix="peers-flux-"))
    cluster = Cluster(workdir)
    holder: dict[str, FluxClient] = {}

    def start() -> RunOne:
        cluster.start_server("--no-http")
        for n in range(WORKERS):
            cluster.start_worker(
                f"w{n}", "--cpus", str(CPUS), "--capacity", str(CPUS), wait=False, env=LOGICAL_CPUS
            )
        client = holder["client"] = FluxClient(cluster.address, credentials=cluster.credentials(Role.CLIENT))
        client.register_file(TASK)

        def run_one(value: int, timeout: float | None) -> Any:
            return json.loads(client.run("one_cpu", value, wait=True, timeout=timeout).output_json)

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

    def start() -> RunOne:
        ray_module.init(
            num_cpus=WORKERS * CPUS, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
        return lambda value, timeout: ray_module.get(one_cpu.remote(value), timeout=timeout)

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

    def start() -> RunOne:
        cluster = holder["cluster"] = LocalCluster(
            n_workers=WORKERS,
            threads_per_worker=CPUS,
            processes=True,
            resources={"CPU": CPUS},
            dashboard_address=None,
        )
        client = holder["client"] = Client(cluster)
        return lambda value, timeout: client.submit(one_cpu, value, resources={"CPU": 1}, pure=False).result(
            timeout=timeout
        )

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
        print(
            f"{system} is not installed here: skipped, the others run (pip install -e '.[peers]' adds Ray and Dask)"
        )
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for n in range(ROUNDS):
        for system in systems:
            rounds[system].append(_round(system))
            print(f"round {n + 1} {system}: {json.dumps(rounds[system][-1])}", file=sys.stderr)
    speeds = [r["speed_s"] for results in rounds.values() for r in results]
    summary = {
        system: {
            "sequential_per_s": _median(results, "sequential_per_s"),
            "sequential_p50_ms": _median(results, "sequential_ms", "p50"),
            "sequential_p99_ms": _median(results, "sequential_ms", "p99"),
            "sequential_timeout_per_s": _median(results, "sequential_timeout_per_s"),
            "sequential_timeout_p50_ms": _median(results, "sequential_timeout_ms", "p50"),
            "sequential_timeout_p99_ms": _median(results, "sequential_timeout_ms", "p99"),
            "burst_per_s": _median(results, "burst_per_s"),
            "burst_submit_returned_s": _median(results, "burst_submit_returned_s"),
            "cold_start_s": _median(results, "cold_start_s"),
            "rss_mb": _median(results, "rss_mb"),
            "pss_mb": _median(results, "pss_mb"),
            "speed_s": _median(results, "speed_s"),
            "round_trip_us": _median(results, "round_trip_us"),
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
                "sequential_with_timeout": SEQUENTIAL,
                "wait_timeout_s": WAIT_TIMEOUT_S,
                "warm_burst": WARM,
                "warm_sequential": WARM_SEQUENTIAL,
                "burst": BURST,
                "rounds": ROUNDS,
            },  # fmt: skip
            "caveats": CAVEATS,
            "skipped": skipped,
            # Every run's speed beside its figures (each round's own speed_s is in ``rounds``).
            "speed_s": speeds,
            "speed_class": "fast" if statistics.median(speeds) < FAST_BELOW_S else "slow",
            # And each run's loopback round trip (bench/common.py: what the speed does not show).
            "round_trip_us": [r["round_trip_us"] for results in rounds.values() for r in results],
            "summary": summary,
            "rounds": rounds,
        },
    )


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in RUNNERS:
        print(json.dumps(RUNNERS[sys.argv[1]]()))
    else:
        main()
