"""Dispatch latency and throughput against a real server and real workers (DESIGN §7).

Each figure is measured twice in one run, side by side: with workers on gRPC
(``grpc``, the core alone), and with workers on HTTP/SSE through the gateway
that ``flux start server`` runs beside the core (``sse``; it reaches the core
in-process). Clients submit over gRPC both times. ``sse_over_grpc`` holds the
ratios; the target is within 2x (latency ratios <= 2, rate ratios >= 0.5).

- receipt: submit -> an in-process raw worker receives ExecutionScheduled, and -> its
  Claim is acknowledged, over sequential executions;
- start: submit -> the workflow body starts on a real worker process, sequentially;
- throughput: trivial executions completed per second with 4 worker processes, submitted
  one RunWorkflow per execution (``burst``) and in bulk, RunWorkflows calls of ``BULK_CHUNK``
  inputs (``bulk_burst``); each with the server's CPU time per execution completed
  (psutil user+system of the server process over the burst, gateway included for SSE);
- server RSS after the runs.

``figures`` also runs on PostgreSQL with several replicas (bench/replicas.py):
workers are then split between the replicas and submissions alternate between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import grpc
import httpx
import psutil
import psycopg
from httpx_sse import connect_sse

from bench.common import percentiles, write
from flux.client import FluxClient
from flux.security import Role
from flux.testing import TRANSPORTS, Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc, resources_pb2, worker_pb2, worker_pb2_grpc

WORKFLOWS = Path(__file__).with_name("workflows.py")
SEQUENTIAL = 1000
BURST = 2000
BULK = 5000
# Inputs per RunWorkflows call in the bulk burst, and how many calls are in flight at once.
BULK_CHUNK = 500
BULK_CONCURRENCY = 2


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


def receipt_latency(cluster: Cluster, n: int, servers: Sequence[str]) -> dict[str, object]:
    """One raw worker on each of ``servers``; the submissions alternate between the servers.

    With replicas, whichever replica's worker receives an execution claims it through that replica,
    and the receipts are also split by path: placed by the replica that took the submission, or by
    another one (which heard of it through the database).
    """
    resources = resources_pb2.WorkerResources(cpu_total=64, cpu_available=64, memory_total=64 << 30,
                                              memory_available=64 << 30)  # fmt: skip
    arrivals: queue.Queue[tuple[float, int, worker_pb2.ExecutionScheduled]] = queue.Queue()

    def read(index: int, stream: Iterator[worker_pb2.WorkerEvent]) -> None:
        try:
            for event in stream:
                if event.WhichOneof("event") == "execution_scheduled":
                    arrivals.put((time.perf_counter(), index, event.execution_scheduled))
        except grpc.RpcError:
            pass

    channels, controls, workers, streams = [], [], [], []
    for index, server in enumerate(servers):
        name = f"bench-raw-{index}"
        channels += [cluster.channel(Role.WORKER, server), cluster.channel(Role.CLIENT, server)]
        worker = worker_pb2_grpc.WorkerServiceStub(channels[-2])
        controls.append(control_pb2_grpc.ControlServiceStub(channels[-1]))
        token = worker.Register(worker_pb2.RegisterRequest(name=name, resources=resources)).session_token
        workers.append((worker, name, token))
        streams.append(worker.Connect(worker_pb2.ConnectRequest(name=name, session_token=token)))
        threading.Thread(target=read, args=(index, streams[-1]), daemon=True).start()
    received, claimed = [], []
    by_path: dict[str, list[float]] = {"same_replica": [], "other_replica": []}
    for i in range(n):
        submitted_to = i % len(servers)
        started = time.perf_counter()
        controls[submitted_to].RunWorkflow(
            control_pb2.RunWorkflowRequest(workflow_name="noop", input_json="1")
        )
        arrived, index, scheduled = arrivals.get(timeout=10)
        worker, name, token = workers[index]
        worker.Claim(worker_pb2.ClaimRequest(name=name, session_token=token,
                                             execution_id=scheduled.execution_id, generation=scheduled.generation))  # fmt: skip
        claimed.append(time.perf_counter() - started)
        received.append(arrived - started)
        by_path["same_replica" if index == submitted_to else "other_replica"].append(arrived - started)
        worker.Complete(worker_pb2.CompleteRequest(name=name, session_token=token,
                                                   execution_id=scheduled.execution_id,
                                                   generation=scheduled.generation, output_json="1"))  # fmt: skip
    for stream in streams:
        stream.cancel()
    for channel in channels:
        channel.close()
    result: dict[str, object] = {
        "submit_to_receipt_ms": percentiles(received),
        "submit_to_claimed_ms": percentiles(claimed),
    }
    if len(servers) > 1:
        result["submit_to_receipt_ms_by_path"] = {path: percentiles(s) for path, s in by_path.items()}
    return result


def start_latency(clients: Sequence[FluxClient], n: int) -> dict[str, object]:
    """Sequential runs of ``stamp``, submitted (and waited for) through ``clients`` in turn."""
    delays = []
    began = time.perf_counter()
    for i in range(n):
        submitted = time.time()
        final = clients[i % len(clients)].run("stamp", None, wait=True, timeout=30)
        delays.append(float(final.output_json) - submitted)
    elapsed = time.perf_counter() - began
    return {"submit_to_body_start_ms": percentiles(delays), "sequential_per_second": round(n / elapsed, 1)}


async def _submit_burst(servers: Sequence[str], n: int, token: str, concurrency: int = 64) -> float:
    """``n`` submissions taken in turn by ``concurrency`` submitters, dealt out between ``servers``."""
    async with contextlib.AsyncExitStack() as stack:
        channels = [await stack.enter_async_context(grpc.aio.insecure_channel(s)) for s in servers]
        controls = [control_pb2_grpc.ControlServiceStub(channel) for channel in channels]
        request = control_pb2.RunWorkflowRequest(workflow_name="noop", input_json="1")
        metadata = (("authorization", f"Bearer {token}"),)
        remaining = iter(range(n))
        started = time.perf_counter()

        async def submitter(control: control_pb2_grpc.ControlServiceStub) -> None:
            for _ in remaining:
                await control.RunWorkflow(request, metadata=metadata)

        await asyncio.gather(*(submitter(controls[i % len(controls)]) for i in range(concurrency)))
        return time.perf_counter() - started


async def _submit_bulk(
    servers: Sequence[str], n: int, token: str, chunk: int = BULK_CHUNK, concurrency: int = BULK_CONCURRENCY
) -> float:
    """``n`` submissions in RunWorkflows calls of ``chunk`` inputs, ``concurrency`` calls in flight."""
    async with contextlib.AsyncExitStack() as stack:
        channels = [await stack.enter_async_context(grpc.aio.insecure_channel(s)) for s in servers]
        controls = [control_pb2_grpc.ControlServiceStub(channel) for channel in channels]
        metadata = (("authorization", f"Bearer {token}"),)
        sizes = iter([min(chunk, n - i) for i in range(0, n, chunk)])
        started = time.perf_counter()

        async def submitter(control: control_pb2_grpc.ControlServiceStub) -> None:
            for size in sizes:
                request = control_pb2.RunWorkflowsRequest(workflow_name="noop", input_json=["1"] * size)
                await control.RunWorkflows(request, metadata=metadata)

        await asyncio.gather(*(submitter(controls[i % len(controls)]) for i in range(concurrency)))
        return time.perf_counter() - started


def _cpu_seconds(processes: Sequence[psutil.Process]) -> float:
    """User plus system CPU time the server processes have used so far."""
    return sum(t.user + t.system for t in (p.cpu_times() for p in processes))


COMPLETED_SINCE = "SELECT COUNT(*) FROM executions WHERE state = 4 AND created_at >= {}"


@contextlib.contextmanager
def completed_counter(db: str) -> Iterator[Callable[[float], int]]:
    """Counts executions completed since a time, read from the store itself: a SQLite file or PostgreSQL."""
    if "://" in db:
        with psycopg.connect(db, autocommit=True) as pg:
            yield lambda since: pg.execute(COMPLETED_SINCE.format("%s"), (since,)).fetchone()[0]
    else:
        with contextlib.closing(sqlite3.connect(db)) as lite:
            yield lambda since: lite.execute(COMPLETED_SINCE.format("?"), (since,)).fetchone()[0]


def throughput(
    cluster: Cluster, n: int, db: str, servers: Sequence[str], bulk: bool = False
) -> dict[str, object]:
    """``n`` trivial executions, one RunWorkflow each (or in bulk), until all completed or 120 s passed."""
    processes = [psutil.Process(p.pid) for p in _server_processes(cluster)]
    token = cluster.token(Role.CLIENT)
    with completed_counter(db) as completed:
        since = time.time()
        cpu_before = _cpu_seconds(processes)
        started = time.perf_counter()
        submit = _submit_bulk(servers, n, token) if bulk else _submit_burst(servers, n, token)
        submit_seconds = asyncio.run(submit)
        done, deadline = 0, time.monotonic() + 120
        while time.monotonic() < deadline:
            done = completed(since)
            if done >= n:
                break
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        cpu = _cpu_seconds(processes) - cpu_before
    result: dict[str, object] = {
        "submitted": n,
        "completed": done,
        "stuck": n - done,
        "submit_seconds": round(submit_seconds, 3),
        "seconds": round(elapsed, 3),
        "completed_per_second": round(done / elapsed, 1),
        # Every server process together (replicas too), over the whole burst.
        "server_cpu_ms_per_execution": round(1000 * cpu / done, 3) if done else None,
        "worker_processes": 4,
    }
    if bulk:
        result["inputs_per_call"] = BULK_CHUNK
    return result


def _server_processes(cluster: Cluster) -> list[subprocess.Popen[str]]:
    return [p for p in (cluster.server, *(process for process, _, _ in cluster.replicas)) if p is not None]


def _connected(client: FluxClient) -> set[str]:
    return {w.name for w in client.workers().workers if w.connected}


def _log_errors(workdir: Path) -> int:
    """ERROR lines and tracebacks in the servers' logs; the first few go to stderr for a look."""
    found = [
        f"{log.name}: {line}"
        for pattern in ("server*.log", "replica-*.log")
        for log in sorted(workdir.glob(pattern))
        for line in log.read_text(errors="replace").splitlines()
        if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")
    ]
    for line in found[:20]:
        print(f"bench: {line}", file=sys.stderr)
    return len(found)


def figures(
    transport: str,
    db: str = "flux.db",
    replicas: int = 1,
    sequential: int = SEQUENTIAL,
    burst_size: int = BURST,
    bulk_size: int = BULK,
) -> dict[str, object]:
    """The dispatch figures on one store: a SQLite file, or a PostgreSQL URL shared by ``replicas`` servers.

    The four worker processes are dealt out between the replicas in turn, and every loop submits
    through the replicas in turn.
    """
    with tempfile.TemporaryDirectory(prefix=f"flux-bench-{transport}-") as tmp:
        cluster = Cluster(Path(tmp), transport, db=db)
        clients: list[FluxClient] = []
        try:
            # The gRPC run is the core alone, as before the gateway existed; the SSE run is the default server.
            args = ["--no-http"] if transport == "grpc" else []
            servers = [
                cluster.start_server(*args),
                *(cluster.start_replica(*args) for _ in range(replicas - 1)),
            ]
            cluster.register(WORKFLOWS)
            if transport == "grpc":
                receipt = receipt_latency(cluster, sequential, servers)
            else:
                receipt = sse_receipt_latency(cluster, sequential)
            names = {"w1", "w2", "w3", "w4"}
            for i, name in enumerate(sorted(names)):
                cluster.start_worker(name, "--capacity", "64", servers=[servers[i % len(servers)]])
            clients = [cluster.client_for(server) for server in servers]
            # Only the worker processes from here on: the raw receipt workers have left. Every
            # replica lists the whole fleet.
            eventually(lambda: all(_connected(client) == names for client in clients))
            start = start_latency(clients, sequential)
            store = db if "://" in db else str(Path(tmp) / db)
            burst = throughput(cluster, burst_size, store, servers)
            bulk_burst = throughput(cluster, bulk_size, store, servers, bulk=True)
            rss = [
                round(psutil.Process(p.pid).memory_info().rss / 2**20, 1) for p in _server_processes(cluster)
            ]
            errors = _log_errors(Path(tmp))
        finally:
            for client in clients:
                client.close()
            cluster.close()
    result = {
        **receipt,
        **start,
        "burst": burst,
        "bulk_burst": bulk_burst,
        "server_rss_mib": rss[0],
        "server_log_errors": errors,
    }
    if replicas > 1:
        result["replica_rss_mib"] = rss[1:]
    return result


def bursts(transport: str, burst_size: int = BURST, bulk_size: int = BULK) -> dict[str, object]:
    """Only the two bursts (one RunWorkflow per execution, then bulk; ``bulk_size`` 0 skips it) on SQLite."""
    with tempfile.TemporaryDirectory(prefix=f"flux-bench-{transport}-") as tmp:
        cluster = Cluster(Path(tmp), transport)
        try:
            servers = [cluster.start_server(*(["--no-http"] if transport == "grpc" else []))]
            cluster.register(WORKFLOWS)
            for name in ("w1", "w2", "w3", "w4"):
                cluster.start_worker(name, "--capacity", "64")
            store = str(Path(tmp) / "flux.db")
            result = {"burst": throughput(cluster, burst_size, store, servers)}
            if bulk_size:
                result["bulk_burst"] = throughput(cluster, bulk_size, store, servers, bulk=True)
            result["server_log_errors"] = _log_errors(Path(tmp))
            return result
        finally:
            cluster.close()


def bursts_main(repeats: int = 3, bulk_size: int = BULK) -> dict[str, object]:
    """``python -m bench.dispatch bursts``: the bursts alone, ``repeats`` times, and their medians.

    Short enough (about a minute a repeat) to measure before/after back to back on a busy box.
    """
    runs = {t: [bursts(t, bulk_size=bulk_size) for _ in range(repeats)] for t in TRANSPORTS}
    medians: dict[str, dict[str, float]] = {}
    for transport, measured in runs.items():
        for kind in ("burst", "bulk_burst"):
            samples = [run[kind] for run in measured if kind in run]
            for figure in ("completed_per_second", "server_cpu_ms_per_execution"):
                values = [s[figure] for s in samples if s[figure] is not None]
                if values:
                    medians.setdefault(transport, {})[f"{kind}.{figure}"] = statistics.median(values)
    result = {"store": "sqlite", "repeats": repeats, "medians": medians, "runs": runs}
    write("dispatch_bursts", result)
    return result


def ratios(base: dict, other: dict) -> dict[str, float]:
    """other / base for each headline figure: latencies (lower is better) and rates (higher is better)."""
    pairs = {
        "receipt_p50": ("submit_to_receipt_ms", "p50"),
        "receipt_p99": ("submit_to_receipt_ms", "p99"),
        "claimed_p50": ("submit_to_claimed_ms", "p50"),
        "start_p50": ("submit_to_body_start_ms", "p50"),
        "start_p99": ("submit_to_body_start_ms", "p99"),
        "sequential_per_second": ("sequential_per_second", None),
        "completed_per_second": ("burst", "completed_per_second"),
        "bulk_completed_per_second": ("bulk_burst", "completed_per_second"),
    }
    result = {}
    for name, (key, sub) in pairs.items():
        a, b = base[key], other[key]
        a, b = (a[sub], b[sub]) if sub else (a, b)
        result[name] = round(b / a, 2) if a else float("nan")
    return result


def main(sequential: int = SEQUENTIAL, burst: int = BURST) -> dict[str, object]:
    measured = {
        transport: figures(transport, sequential=sequential, burst_size=burst) for transport in TRANSPORTS
    }
    result = {
        "store": "sqlite",
        "sequential_executions": sequential,
        **measured,
        # Within 2x of gRPC: latency ratios <= 2, rate ratios >= 0.5.
        "sse_over_grpc": ratios(measured["grpc"], measured["sse"]),
        "targets": {"receipt_p50_ms": 2, "receipt_p99_ms": 10, "start_p50_ms": 5, "start_p99_ms": 20,
                    "sequential_per_second": 300, "completed_per_second": 2000,
                    "bulk_completed_per_second": 2000, "bulk_server_cpu_ms_per_execution": 0.5,
                    "sse_latency_ratio_max": 2.0, "sse_rate_ratio_min": 0.5},
    }  # fmt: skip
    write("dispatch", result)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["bursts"]:
        print(json.dumps(bursts_main(*(int(a) for a in sys.argv[2:]))["medians"], indent=2))
    else:
        main()
