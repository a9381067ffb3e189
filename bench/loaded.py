"""``python -m bench loaded``: latency of a ``cpu=1`` workflow on a loaded box, before and after.

Issue 16 measured a ``cpu=1`` workflow at p50 3.5 ms but p95 8.9 s while the
box was busy, on a worker with nothing reserved. This runs the same shape
twice against one real server, each time with one real worker process whose
probe sees a box with ``LOAD`` cores of foreign load (half the cores by
default) plus the CPU the worker's own process tree really uses:

- ``instant``: the earlier reading, usage since the previous sample with the
  worker's own executions counted as load (``WindowedCpu`` with a zero window
  over counters whose own share is hidden: what ``cpu_percent`` gave);
- ``windowed``: usage over a 5 s window with the worker's own CPU subtracted
  (``WindowedCpu``, the default).

The foreign load is described to the probe, not burned, because the box this
runs on is shared: other tenants' real load would swamp the difference under
test. Only the foreign part is described; the worker, its executions, the
server and the client are real processes on loopback.

Each mode runs sequential executions of a workflow that reserves one core and
burns about 20 ms of it, for ``SECONDS`` or ``RUNS``, whichever ends first, and
records submit -> completed latency. An execution not done within ``PATIENCE``
seconds is cancelled and counted in ``not_done_within_patience`` (and at
``PATIENCE`` in the percentiles, so they read as a lower bound).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.common import percentiles, write
from flux.client import WaitTimedOut
from flux.security import Role
from flux.testing import Cluster, eventually

RUNS = int(os.environ.get("BENCH_LOADED_RUNS", "200"))
SECONDS = float(os.environ.get("BENCH_LOADED_SECONDS", "40"))
LOAD = int(os.environ.get("BENCH_LOADED_FOREIGN_CORES", str(max(1, (psutil.cpu_count() or 2) // 2))))
PATIENCE = float(os.environ.get("BENCH_LOADED_PATIENCE", "15"))
MODES = ("instant", "windowed")

WORKFLOW = """
import time
from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="one_core", requests=ResourceRequest(cpu=1))
def one_core(ctx: ExecutionContext[None]):
    # About 20 ms of real CPU on the core it reserved.
    end = time.process_time() + 0.02
    while time.process_time() < end:
        pass
    return ctx.worker_name


@workflow
def warm(ctx: ExecutionContext[None]):
    return ctx.worker_name
"""

# The worker process: `flux start worker` with the CPU observer chosen by the bench, on a box
# with `foreign` cores busy with other work besides what this process tree really uses.
WORKER = """
import asyncio, sys, time
from pathlib import Path
import psutil
from flux.security import Credentials, Role
from flux.worker.cpu_usage import Counters, WindowedCpu
from flux.worker.grpc_transport import GrpcTransport
from flux.worker.probe import ResourceProbe
from flux.worker.runtime import WorkerConfig, WorkerRuntime

name, address, token, mode, work_dir, foreign = sys.argv[1:]
cores, me, began = psutil.cpu_count() or 1, psutil.Process(), time.monotonic()


def seconds(p):
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class LoadedBox:
    def __init__(self, hide_own):
        self.hide_own = hide_own

    def read(self):
        own = seconds(me) + sum(seconds(c) for c in me.children(recursive=True))
        elapsed = time.monotonic() - began
        return Counters(elapsed * cores, elapsed * float(foreign) + own, 0.0 if self.hide_own else own)


if mode == "instant":
    observer = WindowedCpu(LoadedBox(hide_own=True), window=0.0)
else:
    observer = WindowedCpu(LoadedBox(hide_own=False))
probe = ResourceProbe(gpu_readers=[], cpu_observer=observer)
config = WorkerConfig(name=name, work_dir=Path(work_dir))


async def main():
    transport = GrpcTransport([address], Credentials.for_role(Role.WORKER, token))
    await WorkerRuntime(config, transport, probe).run()


asyncio.run(main())
"""


def run_mode(cluster: Cluster, mode: str) -> dict[str, object]:
    name = f"worker-{mode}"
    log = open(cluster.workdir / f"{name}.log", "w")  # noqa: SIM115 - closed below
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, name, cluster.address, cluster.token(Role.WORKER), mode,
         str(cluster.workdir / "work"), str(LOAD)],
        stdout=log, stderr=log,
    )  # fmt: skip
    try:
        eventually(lambda: cluster.worker_connected(name), timeout=30, what=f"{name} to connect")
        # Fetches and caches the file's code, which one_core shares; it reserves nothing, so it runs.
        cluster.client.run("warm", None, wait=True, timeout=60)
        delays: list[float] = []
        late = 0
        began = time.perf_counter()
        while len(delays) < RUNS and time.perf_counter() - began < SECONDS:
            started = time.perf_counter()
            try:
                final = cluster.client.run("one_core", None, wait=True, timeout=PATIENCE)
            except WaitTimedOut as exc:
                late += 1
                cluster.client.cancel(exc.execution.execution_id)
                delays.append(PATIENCE)
                continue
            assert final.output_json == f'"{name}"', final
            delays.append(time.perf_counter() - started)
        return {"submit_to_completed_ms": percentiles(delays), "not_done_within_patience": late}
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
        eventually(lambda: not cluster.worker_connected(name), timeout=60, what=f"{name} to leave")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "loaded_workflows.py").write_text(WORKFLOW)
        cluster = Cluster(workdir)
        try:
            cluster.start_server("--grace-period", "1")
            cluster.register(workdir / "loaded_workflows.py")
            results = {mode: run_mode(cluster, mode) for mode in MODES}
        finally:
            cluster.close()
    write(
        "loaded",
        {
            "workflow": "cpu=1, about 20 ms of CPU, sequential",
            "foreign_load_cores": LOAD,
            "cores": psutil.cpu_count(),
            "limits": {"runs": RUNS, "seconds": SECONDS, "patience_seconds": PATIENCE},
            **results,
        },
    )


if __name__ == "__main__":
    main()
