"""Dispatch latency and throughput against a real server and real workers (DESIGN §7).

Each figure is measured twice in one run, side by side: with workers on gRPC
(``grpc``, the core alone), and with workers on HTTP/SSE through the gateway
that ``flux start server`` runs beside the core (``sse``; it reaches the core
in-process). Clients submit over gRPC both times. ``sse_over_grpc`` holds the
ratios; the target is within 2x (latency ratios <= 2, rate ratios >= 0.5).

- receipt: submit -> an in-process raw worker receives ExecutionScheduled, and -> its
  Claim is acknowledged, over sequential executions;
- start: submit -> the workflow body starts on a real worker process, sequentially;
- throughput: trivial executions completed per second with 4 worker processes;
- server RSS after the runs.
"""

from __future__ import annotations

import asyncio
import json
import queue
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import grpc
import httpx
import psutil
from httpx_sse import connect_sse

from bench.common import percentiles, write
from flux.auth import Role
from flux.testing import TRANSPORTS, Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc, resources_pb2, worker_pb2, worker_pb2_grpc

WORKFLOWS = Path(__file__).with_name("workflows.py")
SEQUENTIAL = 1000
BURST = 2000


def sse_receipt_latency(cluster: Cluster, n: int) -> dict[str, object]:
    """The same loop as ``receipt_latency``, the worker side over the gateway: httpx and httpx-sse."""
    channel = cluster.channel(Role.CLIENT)
    control = control_pb2_grpc.ControlServiceStub(channel)
    auth = {"Authorization": f"Bearer {cluster.token(Role.WORKER)}"}
    http = httpx.Client(base_url=cluster.gateway_url, timeout=10, trust_env=False, headers=auth)
    resources = {"cpu_total": 64, "cpu_available": 64, "memory_total": 64 << 30, "memory_available": 64 << 30}
    token = http.post("/workers/register", json={"name": "bench-raw", "resources": resources}).json()[
        "session_token"
    ]
    headers = {"X-Flux-Session": token}
    arrivals: queue.Queue[tuple[float, dict]] = queue.Queue()
    stream_client = httpx.Client(
        base_url=cluster.gateway_url, timeout=httpx.Timeout(10, read=None), trust_env=False, headers=auth
    )
    opened: queue.Queue[httpx.Response] = queue.Queue()

    def read() -> None:
        try:
            with connect_sse(stream_client, "GET", "/workers/bench-raw/connect", headers=headers) as source:
                for event in source.iter_sse():
                    if event.event == "connected":
                        opened.put(source.response)
                    elif event.event == "execution_scheduled":
                        arrivals.put((time.perf_counter(), json.loads(event.data)))
        except httpx.HTTPError:
            pass  # closed under it by the main thread

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    response = opened.get(timeout=10)
    received, claimed = [], []
    for _ in range(n):
        started = time.perf_counter()
        control.RunWorkflow(control_pb2.RunWorkflowRequest(workflow_name="noop", input_json="1"))
        arrived, scheduled = arrivals.get(timeout=10)
        path = f"/workers/bench-raw/{{}}/{scheduled['execution_id']}"
        http.post(
            path.format("claim"), json={"generation": scheduled["generation"]}, headers=headers
        ).raise_for_status()
        claimed.append(time.perf_counter() - started)
        received.append(arrived - started)
        http.post(path.format("complete"), json={"generation": scheduled["generation"], "output_json": "1"},
                  headers=headers).raise_for_status()  # fmt: skip
    # Leave at once, as the gRPC side's stream.cancel() does: a stream left open would take
    # (and never claim) work meant for the worker processes below.
    response.close()
    reader.join(timeout=10)
    stream_client.close()
    http.close()
    channel.close()
    return {"submit_to_receipt_ms": percentiles(received), "submit_to_claimed_ms": percentiles(claimed)}


def receipt_latency(cluster: Cluster, n: int) -> dict[str, object]:
    channel = cluster.channel(Role.WORKER)
    worker = worker_pb2_grpc.WorkerServiceStub(channel)
    control_channel = cluster.channel(Role.CLIENT)
    control = control_pb2_grpc.ControlServiceStub(control_channel)
    resources = resources_pb2.WorkerResources(cpu_total=64, cpu_available=64, memory_total=64 << 30,
                                              memory_available=64 << 30)  # fmt: skip
    token = worker.Register(worker_pb2.RegisterRequest(name="bench-raw", resources=resources)).session_token
    stream = worker.Connect(worker_pb2.ConnectRequest(name="bench-raw", session_token=token))
    arrivals: queue.Queue[tuple[float, worker_pb2.ExecutionScheduled]] = queue.Queue()

    def read() -> None:
        try:
            for event in stream:
                if event.WhichOneof("event") == "execution_scheduled":
                    arrivals.put((time.perf_counter(), event.execution_scheduled))
        except grpc.RpcError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    received, claimed = [], []
    for _ in range(n):
        started = time.perf_counter()
        control.RunWorkflow(control_pb2.RunWorkflowRequest(workflow_name="noop", input_json="1"))
        arrived, scheduled = arrivals.get(timeout=10)
        worker.Claim(worker_pb2.ClaimRequest(name="bench-raw", session_token=token,
                                             execution_id=scheduled.execution_id, generation=scheduled.generation))  # fmt: skip
        claimed.append(time.perf_counter() - started)
        received.append(arrived - started)
        worker.Complete(worker_pb2.CompleteRequest(name="bench-raw", session_token=token,
                                                   execution_id=scheduled.execution_id,
                                                   generation=scheduled.generation, output_json="1"))  # fmt: skip
    stream.cancel()
    channel.close()
    control_channel.close()
    return {"submit_to_receipt_ms": percentiles(received), "submit_to_claimed_ms": percentiles(claimed)}


def start_latency(cluster: Cluster, n: int) -> dict[str, object]:
    client = cluster.client
    delays = []
    began = time.perf_counter()
    for _ in range(n):
        submitted = time.time()
        final = client.run("stamp", None, wait=True, timeout=30)
        delays.append(float(final.output_json) - submitted)
    elapsed = time.perf_counter() - began
    return {"submit_to_body_start_ms": percentiles(delays), "sequential_per_second": round(n / elapsed, 1)}


async def _submit_burst(address: str, n: int, token: str, concurrency: int = 64) -> float:
    async with grpc.aio.insecure_channel(address) as channel:
        control = control_pb2_grpc.ControlServiceStub(channel)
        request = control_pb2.RunWorkflowRequest(workflow_name="noop", input_json="1")
        metadata = (("authorization", f"Bearer {token}"),)
        remaining = iter(range(n))
        started = time.perf_counter()

        async def submitter() -> None:
            for _ in remaining:
                await control.RunWorkflow(request, metadata=metadata)

        await asyncio.gather(*(submitter() for _ in range(concurrency)))
        return time.perf_counter() - started


def throughput(cluster: Cluster, n: int, db: Path) -> dict[str, object]:
    with sqlite3.connect(db) as reader:
        since = time.time()
        count = "SELECT COUNT(*) FROM executions WHERE state=4 AND created_at >= ?"
        started = time.perf_counter()
        submit_seconds = asyncio.run(_submit_burst(cluster.address, n, cluster.token(Role.CLIENT)))
        done, deadline = 0, time.monotonic() + 120
        while time.monotonic() < deadline:
            done = reader.execute(count, (since,)).fetchone()[0]
            if done >= n:
                break
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
    return {
        "submitted": n,
        "completed": done,
        "stuck": n - done,
        "submit_seconds": round(submit_seconds, 3),
        "seconds": round(elapsed, 3),
        "completed_per_second": round(done / elapsed, 1),
        "worker_processes": 4,
    }


def figures(transport: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"flux-bench-{transport}-") as tmp:
        cluster = Cluster(Path(tmp), transport)
        try:
            # The gRPC run is the core alone, as before the gateway existed; the SSE run is the default server.
            cluster.start_server(*(["--no-http"] if transport == "grpc" else []))
            cluster.register(WORKFLOWS)
            receipt = (receipt_latency if transport == "grpc" else sse_receipt_latency)(cluster, SEQUENTIAL)
            names = {"w1", "w2", "w3", "w4"}
            for name in sorted(names):
                cluster.start_worker(name, "--capacity", "64")
            # Only the worker processes from here on: the raw receipt worker has left.
            eventually(lambda: {w.name for w in cluster.client.workers().workers if w.connected} == names)
            start = start_latency(cluster, SEQUENTIAL)
            burst = throughput(cluster, BURST, Path(tmp) / "flux.db")
            assert cluster.server is not None
            rss = psutil.Process(cluster.server.pid).memory_info().rss
        finally:
            cluster.close()
    return {**receipt, **start, "burst": burst, "server_rss_mib": round(rss / 2**20, 1)}


def _ratios(grpc_figures: dict, sse_figures: dict) -> dict[str, float]:
    """sse / grpc for each headline figure: latencies (lower is better) and rates (higher is better)."""
    pairs = {
        "receipt_p50": ("submit_to_receipt_ms", "p50"),
        "receipt_p99": ("submit_to_receipt_ms", "p99"),
        "claimed_p50": ("submit_to_claimed_ms", "p50"),
        "start_p50": ("submit_to_body_start_ms", "p50"),
        "start_p99": ("submit_to_body_start_ms", "p99"),
        "sequential_per_second": ("sequential_per_second", None),
        "completed_per_second": ("burst", "completed_per_second"),
    }
    ratios = {}
    for name, (key, sub) in pairs.items():
        a, b = grpc_figures[key], sse_figures[key]
        a, b = (a[sub], b[sub]) if sub else (a, b)
        ratios[name] = round(b / a, 2) if a else float("nan")
    return ratios


def main() -> dict[str, object]:
    measured = {transport: figures(transport) for transport in TRANSPORTS}
    result = {
        "store": "sqlite",
        "sequential_executions": SEQUENTIAL,
        **measured,
        # Within 2x of gRPC: latency ratios <= 2, rate ratios >= 0.5.
        "sse_over_grpc": _ratios(measured["grpc"], measured["sse"]),
        "targets": {"receipt_p50_ms": 2, "receipt_p99_ms": 10, "start_p50_ms": 5, "start_p99_ms": 20,
                    "sequential_per_second": 300, "completed_per_second": 2000,
                    "sse_latency_ratio_max": 2.0, "sse_rate_ratio_min": 0.5},
    }  # fmt: skip
    write("dispatch", result)
    return result


if __name__ == "__main__":
    main()
