"""Gangs through a real server: submission -> every member dispatched, with simulated workers.

A real server process (SQLite) and, in a second process, ``WORKERS`` simulated workers over the
real wire (``bench.fleet.Fleet``: a ``Register`` and a ``Connect`` stream each, claiming and
completing what they are dispatched). ``SUBMITS`` gangs of 8 (``fleet_gang``) are submitted one
after another with room for them; each gang's figure is from its ``RunWorkflow`` (the wall time
is its input) to the arrival of its last member's dispatch at its simulated worker (one machine,
one clock). Target (issue 45): p99 <= 20 ms.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from bench.common import percentiles
from bench.fleet import ROOT, WORKFLOWS, Fleet
from flux.security import Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc

WORKERS = int(os.environ.get("FLUX_BENCH_GANG_WORKERS", "1000"))
SUBMITS = int(os.environ.get("FLUX_BENCH_GANG_SUBMITS", "200"))


class GangFleet(Fleet):
    """``Fleet``, but keeping every member's arrival per execution: a gang is dispatched at its last."""

    def __init__(self, address: str, token: str, count: int):
        super().__init__(address, token, count)
        self.arrivals: dict[str, list[float]] = {}

    async def _serve(self, stub, name: str, token: str, call) -> None:  # type: ignore[no-untyped-def]
        try:
            while (event := await call.read()) is not grpc.aio.EOF:
                if event.WhichOneof("event") == "execution_scheduled":
                    scheduled = event.execution_scheduled
                    waited = time.time() - float(json.loads(scheduled.input_json))
                    self.arrivals.setdefault(scheduled.execution_id, []).append(waited)
                    task = asyncio.get_running_loop().create_task(self._run(stub, name, token, scheduled))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass


async def _simulate(address: str, token: str, count: int) -> None:
    fleet = GangFleet(address, token, count)
    await fleet.join()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while (line := (await loop.run_in_executor(None, sys.stdin.readline)).strip()) != "quit":
        if line == "report":
            print(json.dumps(fleet.arrivals), flush=True)
    for task in list(fleet.tasks):
        task.cancel()
    for channel in fleet.channels:
        await channel.close()


def run(workers: int = WORKERS, submits: int = SUBMITS) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="flux-bench-gangs-") as tmp:
        cluster = Cluster(Path(tmp))
        child = None
        try:
            cluster.start_server("--log-level", "WARNING", "--max-workers", str(workers + 10))
            cluster.register(WORKFLOWS)
            child = subprocess.Popen(
                [sys.executable, "-m", "bench.gangs_server", cluster.address, str(workers)],
                cwd=ROOT,
                env={**os.environ, "FLUX_BENCH_TOKEN": cluster.token(Role.WORKER)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None and child.stdin is not None
            if child.stdout.readline().strip() != "ready":
                raise SystemExit("the simulated fleet did not start")
            time.sleep(2.0)
            control = control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))
            for _ in range(submits):
                control.RunWorkflow(
                    control_pb2.RunWorkflowRequest(
                        workflow_name="fleet_gang", input_json=json.dumps(time.time())
                    )
                )
                time.sleep(0.01)
            deadline = time.monotonic() + 60
            while True:
                child.stdin.write("report\n")
                child.stdin.flush()
                arrivals = json.loads(child.stdout.readline())
                whole = [max(a) for a in arrivals.values() if len(a) == 8]
                if len(whole) >= submits or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            return {
                "workers": workers,
                "gang_size": 8,
                "gangs": submits,
                "gangs_fully_dispatched": len(whole),
                "submit_to_all_members_dispatched_ms": percentiles(whole),
                "target_p99_ms": 20,
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


if __name__ == "__main__":
    asyncio.run(_simulate(sys.argv[1], os.environ["FLUX_BENCH_TOKEN"], int(sys.argv[2])))
