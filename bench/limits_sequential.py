"""The sequential path, hop by hop, against the bare ``grpc.aio`` floor (``python -m bench limits``).

One thing at a time, each started once the last answered, ``SEQUENTIAL`` times:

- **floor** (a bare ``grpc.aio`` echo server in a process of its own, no Flux code, bench/limits.py's
  ``_serve``): a unary call, and a message echoed on one open stream (a round trip: the server
  reads one message and writes one). p50 latency and the server's CPU per call or round trip.
- **Flux** (the peers workload: a server with ``--no-http`` and 4 worker processes of 2 CPUs, the
  task that returns its input):

  - ``submit``: ``RunWorkflow`` with every worker paused, so the server only validates, commits
    and answers (the work stays queued): what a submission costs against the unary floor;
  - ``run``: ``run(wait=True)`` on the client's open ``RunAndWaitStream`` call: the client's
    message in, the receipt and the final state out, and between them the dispatch to a worker,
    its body and its result;
  - ``run_with_timeout``: the same with ``timeout=`` (issue 46: it rides the same call).

Each Flux hop's p50 and server CPU are put over the stream round trip's: a sequential run moves
at least two round trips' worth of messages through the server (client in, final state out;
dispatch out, result in) and the receipt besides, so about 2.5x the floor is what is left when
nothing but the transport costs. What a figure holds beyond that is Flux's own work (the
store's commit, the dispatcher, the conversions).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.common import percentiles

SEQUENTIAL = 500
METADATA = (("authorization", "Bearer bench"),)  # a header on every call, as Flux's clients send


def _cpu(process: psutil.Process) -> float:
    return sum(process.cpu_times()[:2])


async def _floor(address: str, server: psutil.Process, service: str) -> dict[str, dict[str, float]]:
    async with grpc.aio.insecure_channel(address) as channel:
        unary = channel.unary_unary(f"/{service}/Unary")
        await unary(b"warm")
        latencies, before = [], _cpu(server)
        for _ in range(SEQUENTIAL):
            began = time.perf_counter()
            await unary(b"run", metadata=METADATA)
            latencies.append(time.perf_counter() - began)
        unary_cpu = _cpu(server) - before

        call = channel.stream_stream(f"/{service}/Stream")(metadata=METADATA)
        await call.write(b"warm")
        await call.read()
        trips, before = [], _cpu(server)
        for _ in range(SEQUENTIAL):
            began = time.perf_counter()
            await call.write(b"run")
            await call.read()
            trips.append(time.perf_counter() - began)
        stream_cpu = _cpu(server) - before
        await call.done_writing()
    return {
        "bare_unary_call": _figure(latencies, unary_cpu),
        "bare_stream_round_trip": _figure(trips, stream_cpu),
    }


def _figure(latencies: list[float], server_cpu: float, **more: float) -> dict[str, float]:
    return {
        "p50_ms": percentiles(latencies)["p50"],
        "p99_ms": percentiles(latencies)["p99"],
        "server_cpu_ms": round(1000 * server_cpu / len(latencies), 3),
        **more,
    }


def floor_round() -> dict[str, dict[str, float]]:
    """The bare server's sequential figures, from a freshly spawned one (no Flux code in it)."""
    from bench.limits import SERVICE, bare_server

    with bare_server() as (address, server):
        return asyncio.run(_floor(address, server, SERVICE))


def flux_round() -> dict[str, dict[str, float]]:
    """Flux's sequential hops on the peers workload, in a fresh cluster."""
    from bench.peers import CPUS, LOGICAL_CPUS, TASK, WORKERS
    from flux.client import FluxClient
    from flux.security import Role
    from flux.testing import Cluster

    with tempfile.TemporaryDirectory(prefix="limits-seq-") as workdir:
        cluster = Cluster(Path(workdir))
        client = None
        try:
            cluster.start_server("--no-http")
            assert cluster.server is not None
            server = psutil.Process(cluster.server.pid)
            names = [f"w{n}" for n in range(WORKERS)]
            workers = [
                psutil.Process(
                    cluster.start_worker(
                        name, "--cpus", str(CPUS), "--capacity", str(CPUS), env=LOGICAL_CPUS
                    ).pid
                )
                for name in names
            ]
            client = FluxClient(cluster.address, credentials=cluster.credentials(Role.CLIENT))
            client.register_file(TASK)
            for n in range(50):  # the call open, every worker up
                assert json.loads(client.run("one_cpu", n, wait=True, timeout=30).output_json) == n

            def timed(run: Callable[[int], Any]) -> dict[str, float]:
                latencies = []
                server_before, workers_before = _cpu(server), sum(map(_cpu, workers))
                for n in range(SEQUENTIAL):
                    began = time.perf_counter()
                    run(n)
                    latencies.append(time.perf_counter() - began)
                workers_cpu = sum(map(_cpu, workers)) - workers_before
                return _figure(
                    latencies,
                    _cpu(server) - server_before,
                    workers_cpu_ms=round(1000 * workers_cpu / SEQUENTIAL, 3),
                )

            result = {
                "run": timed(lambda n: client.run("one_cpu", n, wait=True)),
                "run_with_timeout": timed(lambda n: client.run("one_cpu", n, wait=True, timeout=30)),
            }
            for name in names:
                client.pause_worker(name)
            result["submit"] = timed(lambda n: client.run("one_cpu", n))
            return result
        finally:
            if client is not None:
                client.close()
            cluster.close()


def table(
    floor: dict[str, dict[str, float]], flux: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Each hop with its ratios to the floor it is measured against (p50 and server CPU)."""
    trip, unary = floor["bare_stream_round_trip"], floor["bare_unary_call"]
    against = {"submit": unary, "run": trip, "run_with_timeout": trip}
    rows = dict(floor)
    for hop, figures in flux.items():
        base = against[hop]
        rows[hop] = {
            **figures,
            "p50_over_floor": round(figures["p50_ms"] / base["p50_ms"], 2),
            "server_cpu_over_floor": round(figures["server_cpu_ms"] / base["server_cpu_ms"], 2),
        }
    return rows
