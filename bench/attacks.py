"""The core's responsiveness while its HTTP front is attacked (issue 12, findings 1 and 2).

One real ``flux start server`` (gRPC core and gateway in one process, one event
loop, default limits) on loopback. For each scenario the attack runs in separate
processes, so the bench's own measuring is not slowed by it, and meanwhile this
process times ``GET /healthz`` (over one kept-alive connection opened before the
attack) and gRPC ``GetStatus``, alternately:

- ``idle``: no attack;
- ``unauthenticated_uploads``: 3 clients each posting 14 MiB to ``POST /workflows``
  without a token, in a loop (refused 401 from the headers);
- ``slowloris``: 1,000 connections that send a request head one header line a
  second and are reopened when the server cuts them (408 after the head timeout,
  503 beyond the connection cap), measured for at least 13 s so the cuts happen;
- ``authenticated_uploads``: the same uploads with the API token (decoded off the
  loop, then refused 413 by the core: a source is at most 4 MiB).

Bounded: a fixed number of samples per scenario (more while slowloris lasts), loopback only.
"""

from __future__ import annotations

import multiprocessing
import resource
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.common import percentiles, write
from flux.security import Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc

SAMPLES = 400
UPLOADERS = 3
UPLOAD_BYTES = 14 * 1024 * 1024
SLOW_CONNECTIONS = 1000
WARMUP_SECONDS = 2.0
HEAD_TIMEOUT = 10.0  # the server's default --http-head-timeout


# ------------------------------------------------------------------ attackers (own processes)


def _uploader(url: str, token: str, stop: Any, answers: Any) -> None:
    body = b'{"source": "' + b"x" * UPLOAD_BYTES + b'"}'
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    with httpx.Client(base_url=url, trust_env=False, timeout=60) as http:
        while not stop.is_set():
            try:
                status = http.post("/workflows", content=body, headers=headers).status_code
            except httpx.HTTPError:
                status = 0
            with answers.get_lock():
                answers[status // 100] += 1


def _slowloris(host: str, port: int, count: int, stop: Any, stats: Any) -> None:
    """``count`` connections dribbling a head; stats: [opened, cut by the server, open now]."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))

    def opened() -> socket.socket | None:
        try:
            sock = socket.create_connection((host, port), timeout=5)
            sock.setblocking(False)
            sock.send(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n")
            stats[0] += 1
            return sock
        except OSError:
            return None

    def still_open(sock: socket.socket) -> bool:
        """Send one more header line, unless the server has answered (408, 503) or closed."""
        try:
            sock.recv(4096)
            return False  # an answer, or the end of the connection
        except BlockingIOError:
            pass
        except OSError:
            return False
        try:
            sock.send(b"X-Slow: 1\r\n")
            return True
        except OSError:
            return False

    socks = [opened() for _ in range(count)]
    while not stop.is_set():
        for i, sock in enumerate(socks):
            if sock is not None and still_open(sock):
                continue
            if sock is not None:
                sock.close()
                stats[1] += 1
            socks[i] = opened()
        stats[2] = sum(s is not None for s in socks)
        stop.wait(1.0)
    for sock in socks:
        if sock is not None:
            sock.close()


# ------------------------------------------------------------------ measuring


def _measure(
    http: httpx.Client, status: Callable[[], object], samples: int, min_seconds: float = 0.0
) -> dict[str, object]:
    healthz, grpc_status, failures = [], [], 0
    until = time.monotonic() + min_seconds
    while len(grpc_status) < samples or time.monotonic() < until:
        started = time.perf_counter()
        try:
            http.get("/healthz").raise_for_status()
            healthz.append(time.perf_counter() - started)
        except httpx.HTTPError:
            failures += 1
        started = time.perf_counter()
        status()
        grpc_status.append(time.perf_counter() - started)
    return {
        "healthz_ms": percentiles(healthz),
        "get_status_ms": percentiles(grpc_status),
        "healthz_failures": failures,
    }


def _scenario(
    cluster: Cluster, http: httpx.Client, status: Callable[[], object], name: str, samples: int
) -> dict[str, object]:
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    answers = context.Array("i", 6)  # by status class: 0 (transport error), 1xx .. 5xx
    stats = context.Array("i", 3)
    attackers = []
    url = cluster.gateway_url
    if name in ("unauthenticated_uploads", "authenticated_uploads"):
        token = cluster.token(Role.CLIENT) if name == "authenticated_uploads" else ""
        attackers = [
            context.Process(target=_uploader, args=(url, token, stop, answers)) for _ in range(UPLOADERS)
        ]
    elif name == "slowloris":
        host, port = url.removeprefix("http://").rsplit(":", 1)
        attackers = [
            context.Process(target=_slowloris, args=(host, int(port), SLOW_CONNECTIONS, stop, stats))
        ]
    for attacker in attackers:
        attacker.start()
    try:
        time.sleep(WARMUP_SECONDS if attackers else 0)
        http.get("/healthz")  # keep the measuring connection alive across the warm-up
        # Slow connections are cut after the 10 s head timeout and reopened: measure through that.
        measured = _measure(http, status, samples, HEAD_TIMEOUT + 3.0 if name == "slowloris" else 0.0)
    finally:
        stop.set()
        for attacker in attackers:
            attacker.join(timeout=90)
            if attacker.is_alive():
                attacker.kill()
    if name.endswith("uploads"):
        measured["upload_answers"] = {
            label: answers[i]
            for i, label in enumerate(("error", "1xx", "2xx", "3xx", "4xx", "5xx"))
            if answers[i]
        }
    if name == "slowloris":
        measured["slow_connections"] = {
            "opened": stats[0],
            "cut_by_server": stats[1],
            "open_at_end": stats[2],
        }
    return measured


def main(samples: int = SAMPLES) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="flux-bench-attacks-") as workdir:
        cluster = Cluster(Path(workdir))
        try:
            cluster.start_server()  # default limits: 10 s head timeout, 1,000 connections
            channel = cluster.channel(Role.CLIENT)
            stub = control_pb2_grpc.ControlServiceStub(channel)

            def status() -> object:
                return stub.GetStatus(control_pb2.GetStatusRequest(), timeout=30)

            with httpx.Client(base_url=cluster.gateway_url, trust_env=False, timeout=30) as http:
                scenarios = {
                    name: _scenario(cluster, http, status, name, samples)
                    for name in ("idle", "unauthenticated_uploads", "slowloris", "authenticated_uploads")
                }
            channel.close()
        finally:
            cluster.close()
    result = {
        "samples_per_scenario": samples,
        "uploaders": UPLOADERS,
        "upload_bytes": UPLOAD_BYTES,
        "slow_connections": SLOW_CONNECTIONS,
        "server_limits": {"http_head_timeout_s": 10, "http_max_connections": 1000, "max_head_bytes": 32768},
        **scenarios,
    }
    write("attacks", result)
    return result


if __name__ == "__main__":
    main()
