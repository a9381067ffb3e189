"""Fleet scale (issue 18): dispatch, pauses, idle cost with thousands of connected gRPC workers.

A real server process (SQLite) and, in a second process, ``N`` simulated
workers over the real wire: one asyncio loop opening ``Register`` then a
``Connect`` stream per worker, one channel per ``STREAMS_PER_CHANNEL`` of them,
claiming and completing whatever it is dispatched (the core cannot tell them
from worker processes, which would not fit on this box). Three machine types
(4, 8, 16 cores), labels ``zone=zone-0..3``, capacity 4.

Measured per fleet size (``FLUX_BENCH_FLEET=1000,10000``, default both):
- submit -> dispatch p50/p99: ``RunWorkflow`` called with the wall time as its
  input, the dispatch's arrival at the simulated worker read against it (one
  machine, one clock); ``SUBMITS`` sequential submissions each for
  unconstrained work and for constrained work (``zone=zone-1``, 2 CPUs);
- the server loop's longest pause while idle and while dispatching: the
  server's own probe (``FLUX_LOOP_PROBE``, flux/observe/pauses.py: sleep
  overshoot, and every full collection timed through ``gc.callbacks``);
- the simulated fleet's own loop, probed the same way while dispatching (it reads every
  worker's pings on that one loop, which a real fleet's workers do not share), and where the
  slowest ``SLOWEST`` of the dispatches were: how many waited across a pause of the fleet's loop,
  how many across a pause of the server's (a pause over 2 ms between submission and arrival);
- idle server CPU (percent of one core, ``IDLE_S`` seconds with every stream
  open and pinged every ``PING_S``, the default; the probe rests meanwhile, as
  its own wake-ups cost about 3%), and RSS per connected worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import psutil

from bench.common import percentiles, write
from flux.observe.pauses import LoopProbe
from flux.security import Credentials, Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc, resources_pb2, worker_pb2, worker_pb2_grpc

WORKFLOWS = Path(__file__).with_name("fleet_workflows.py")
SIZES = (1000, 10_000)
SUBMITS = int(os.environ.get("FLUX_BENCH_FLEET_SUBMITS", "200"))
STREAMS_PER_CHANNEL = 250
JOIN_BATCH = 200
IDLE_S = 16.0
# The server's --ping-interval: FLUX_BENCH_FLEET_PING_S=600 all but stops the keepalive pings, to see
# what they cost the submissions (at 10,000 workers, 667 pings a second).
PING_S = float(os.environ.get("FLUX_BENCH_FLEET_PING_S", "15.0"))
SLOW_MS = 20.0
# The share of dispatches, slowest first, whose waits are put down to either loop's pauses.
SLOWEST = 0.02
FLEET_PROBE = "FLUX_BENCH_FLEET_PROBE"
KINDS = ("unconstrained", "constrained")
# The server's --placement (issue 45): FLUX_BENCH_PLACEMENT=binpack measures binpack's figures.
PLACEMENT = os.environ.get("FLUX_BENCH_PLACEMENT", "spread")
ROOT = Path(__file__).resolve().parent.parent


def _resources(i: int) -> resources_pb2.WorkerResources:
    cpus = (4, 8, 16)[i % 3]
    return resources_pb2.WorkerResources(
        cpu_total=cpus, cpu_available=cpus, memory_total=cpus << 31, memory_available=cpus << 31,
        disk_total=200 << 30, disk_free=200 << 30,
    )  # fmt: skip


# ----------------------------------------------------------------- the simulated fleet (child process)


class Fleet:
    def __init__(self, address: str, token: str, count: int):
        self.credentials = Credentials(token, None)
        self.address, self.count = address, count
        self.latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
        # Wall time of each dispatch's arrival, beside its latency.
        self.arrivals: dict[str, list[float]] = {kind: [] for kind in KINDS}
        self.tasks: set[asyncio.Task[None]] = set()

    async def join(self) -> None:
        self.channels = [
            self.credentials.aio_channel(self.address) for _ in range(-(-self.count // STREAMS_PER_CHANNEL))
        ]
        for start in range(0, self.count, JOIN_BATCH):
            await asyncio.gather(*(self._join(i) for i in range(start, min(start + JOIN_BATCH, self.count))))

    async def _join(self, i: int) -> None:
        stub = worker_pb2_grpc.WorkerServiceStub(self.channels[i // STREAMS_PER_CHANNEL])
        name = f"fleet-{i:05d}"
        metadata = self.credentials.metadata
        registered = await stub.Register(
            worker_pb2.RegisterRequest(
                name=name, labels={"zone": f"zone-{i % 4}"}, resources=_resources(i), capacity=4
            ),
            metadata=metadata,
        )
        token = registered.session_token
        call = stub.Connect(worker_pb2.ConnectRequest(name=name, session_token=token), metadata=metadata)
        await call.read()  # Connected
        task = asyncio.get_running_loop().create_task(self._serve(stub, name, token, call))
        self.tasks.add(task)

    async def _serve(self, stub, name: str, token: str, call) -> None:  # type: ignore[no-untyped-def]
        try:
            while (event := await call.read()) is not grpc.aio.EOF:
                if event.WhichOneof("event") == "execution_scheduled":
                    scheduled = event.execution_scheduled
                    arrived = time.time()
                    kind = (
                        "constrained" if scheduled.workflow.name == "fleet_constrained" else "unconstrained"
                    )
                    self.latencies[kind].append(arrived - float(json.loads(scheduled.input_json)))
                    self.arrivals[kind].append(arrived)
                    task = asyncio.get_running_loop().create_task(self._run(stub, name, token, scheduled))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass

    async def _run(self, stub, name: str, token: str, scheduled) -> None:  # type: ignore[no-untyped-def]
        metadata = self.credentials.metadata
        ids = {"name": name, "session_token": token, "execution_id": scheduled.execution_id}
        await stub.Claim(worker_pb2.ClaimRequest(**ids, generation=scheduled.generation), metadata=metadata)
        await stub.Complete(
            worker_pb2.CompleteRequest(**ids, generation=scheduled.generation, output_json="null"),
            metadata=metadata,
        )


async def _simulate(address: str, token: str, count: int) -> None:
    fleet = Fleet(address, token, count)
    await fleet.join()
    # Its own loop's pauses, probed as the server's are (started after the connect storm).
    probe = LoopProbe(Path(os.environ[FLEET_PROBE])) if os.environ.get(FLEET_PROBE) else None
    if probe is not None:
        probe.start()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while (line := (await loop.run_in_executor(None, sys.stdin.readline)).strip()) != "quit":
        if line == "report":
            print(json.dumps({"latencies": fleet.latencies, "arrivals": fleet.arrivals}), flush=True)
    if probe is not None:
        await probe.stop()
    for task in list(fleet.tasks):
        task.cancel()
    for channel in fleet.channels:
        await channel.close()


# ----------------------------------------------------------------- the measuring side (parent)


def _probe(path: Path, since: float, until: float) -> dict[str, object]:
    """The loop's pauses in [since, until]; ``busy`` figures count only the CPU the loop's thread
    spent in a pause (the rest is waiting for a core on a shared machine)."""
    record = json.loads(path.read_text())
    lags = [(late, cpu) for at, late, cpu in record["lags"] if since <= at <= until]
    full = [
        (took, cpu) for at, gen, took, cpu, _ in record["collections"] if gen == 2 and since <= at <= until
    ]
    return {
        "longest_pause_ms": round(max((late for late, _ in lags), default=0.0) * 1000, 1),
        "longest_busy_pause_ms": round(max((min(late, cpu) for late, cpu in lags), default=0.0) * 1000, 1),
        "pauses_over_20ms": sum(1 for late, _ in lags if late * 1000 > SLOW_MS),
        "busy_pauses_over_20ms": sum(1 for late, cpu in lags if min(late, cpu) * 1000 > SLOW_MS),
        "gen2_collections": len(full),
        "gen2_pause_ms_max": round(max((took for took, _ in full), default=0.0) * 1000, 1),
        "gen2_cpu_ms_max": round(max((cpu for _, cpu in full), default=0.0) * 1000, 1),
        "gen2_pause_ms_median": round(statistics.median(t for t, _ in full) * 1000, 1) if full else 0.0,
    }


def _slowest(report: dict[str, dict[str, list[float]]], probes: dict[str, Path]) -> dict[str, object]:
    """The slowest ``SLOWEST`` of the dispatches, and how many of them waited across a pause (over
    2 ms, ``flux.observe.pauses.LAG_FLOOR``) of each probed loop: one that ended between the
    submission and the arrival."""
    samples = sorted(
        ((latency, arrived) for kind in KINDS
         for latency, arrived in zip(report["latencies"][kind], report["arrivals"][kind], strict=True)),
        reverse=True,
    )  # fmt: skip
    slowest = samples[: max(1, round(len(samples) * SLOWEST))]
    result: dict[str, object] = {"n": len(slowest), "from_ms": round(slowest[-1][0] * 1000, 2)}
    for name, path in probes.items():
        ends = [at for at, _, _ in json.loads(path.read_text())["lags"]]
        result[f"behind_a_{name}_pause"] = sum(
            any(arrived - latency <= end <= arrived for end in ends) for latency, arrived in slowest
        )
    return result


def _wait_for(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the server's loop probe never wrote {path}")
        time.sleep(0.1)


def run_one(workers: int, submits: int = SUBMITS) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="flux-bench-fleet-") as tmp:
        probe = Path(tmp) / "probe.json"
        fleet_probe = Path(tmp) / "fleet-probe.json"
        os.environ["FLUX_LOOP_PROBE"] = str(probe)
        cluster = Cluster(Path(tmp))
        child = None
        try:
            cluster.start_server(
                "--log-level", "WARNING", "--max-workers", str(workers + 10), "--ping-interval", str(PING_S),
                "--placement", PLACEMENT,
            )  # fmt: skip
            cluster.register(WORKFLOWS)
            assert cluster.server is not None
            server = psutil.Process(cluster.server.pid)
            _wait_for(probe)
            time.sleep(1.0)
            rss_before = server.memory_info().rss
            started = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-m", "bench.fleet", "--simulate", cluster.address, str(workers)],
                cwd=ROOT,
                env={
                    **os.environ,
                    "FLUX_BENCH_TOKEN": cluster.token(Role.WORKER),
                    FLEET_PROBE: str(fleet_probe),
                },
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None and child.stdin is not None
            if child.stdout.readline().strip() != "ready":
                raise SystemExit("the simulated fleet did not start")
            join_s = time.perf_counter() - started
            time.sleep(2.0)  # the storm's aftermath: anything deferred to the next ticks
            # Idle CPU with the probe resting: its own wake-ups are not the server's cost.
            server.send_signal(signal.SIGUSR1)
            child.send_signal(signal.SIGUSR1)  # the fleet's probe rests too: its wake-ups share the cores
            time.sleep(0.5)
            cpu_before = server.cpu_times()
            time.sleep(IDLE_S)
            cpu_after = server.cpu_times()
            idle_cpu = (cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system) / IDLE_S
            server.send_signal(signal.SIGUSR2)
            child.send_signal(signal.SIGUSR2)
            # Then the idle loop's pauses, over as long again, with the probe awake.
            idle_from = time.time()
            time.sleep(IDLE_S)
            idle_until = time.time()
            rss_after = server.memory_info().rss

            control = control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))
            busy_from = time.time()
            for workflow in ("fleet_unconstrained", "fleet_constrained"):
                for _ in range(submits):
                    control.RunWorkflow(
                        control_pb2.RunWorkflowRequest(
                            workflow_name=workflow, input_json=json.dumps(time.time())
                        )
                    )
                    time.sleep(0.005)
            deadline = time.monotonic() + 60
            while True:
                child.stdin.write("report\n")
                child.stdin.flush()
                report = json.loads(child.stdout.readline())
                latencies = report["latencies"]
                if all(len(latencies[k]) >= submits for k in KINDS) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            busy_until = time.time()
            time.sleep(0.6)  # the probe writes twice a second
            return {
                "workers": workers,
                "join_s": round(join_s, 1),
                "submit_to_dispatch_ms": {k: percentiles(latencies[k]) for k in KINDS},
                "idle": {
                    "server_cpu_percent": round(idle_cpu * 100, 1),
                    **_probe(probe, idle_from, idle_until),
                },
                "dispatching": _probe(probe, busy_from, busy_until),
                "fleet_loop_dispatching": _probe(fleet_probe, busy_from, busy_until),
                "slowest_dispatches": _slowest(report, {"fleet": fleet_probe, "server": probe}),
                "rss_per_worker_kib": round((rss_after - rss_before) / workers / 1024, 1),
            }
        finally:
            if child is not None:
                if child.poll() is None and child.stdin is not None:
                    child.stdin.write("quit\n")
                    child.stdin.flush()
                try:
                    child.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    child.kill()
            cluster.close()
            os.environ.pop("FLUX_LOOP_PROBE", None)


def main(sizes: tuple[int, ...] | None = None) -> dict[str, object]:
    chosen = os.environ.get("FLUX_BENCH_FLEET")
    sizes = sizes or (tuple(int(n) for n in chosen.split(",")) if chosen else SIZES)
    result: dict[str, object] = {
        "submits_per_kind": SUBMITS,
        "ping_interval_s": PING_S,
        "placement": PLACEMENT,
        "runs": [run_one(n) for n in sizes],
    }
    write("fleet", result)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--simulate"]:
        asyncio.run(_simulate(sys.argv[2], os.environ["FLUX_BENCH_TOKEN"], int(sys.argv[3])))
    else:
        main()
