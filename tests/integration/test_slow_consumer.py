"""A worker that opens its SSE stream and then never reads it must cost the server a bounded amount.

The slow worker is a raw socket with a small receive buffer: it reads the
response head and the ``connected`` event, then nothing. It registers a
large capacity and the reading worker a small one, so least-loaded
placement hands the slow one most of every pass; each dispatch carries a
64 KiB input, and every unclaimed one is taken back at the 2 s ack deadline
and placed again. The design bounds what that costs: the core queues at
most ``MAX_BUFFERED_EVENTS`` events per stream, cuts the stream past that,
and the unread dispatches go to the worker that reads.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from flux.dispatcher.state.session import MAX_BUFFERED_EVENTS
from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

EXECUTIONS = 300
INPUT = json.dumps("x" * 65536)
# The server keeps every execution's 64 KiB input and its ~64 KiB output (echo returns its
# input) whoever runs it: ~40 MiB for 300; with the stream held to its bound, peak growth measured
# 45-50 MiB. The slow worker adds only its queue (at most MAX_BUFFERED_EVENTS events that
# reference those same executions) and one socket's transport buffer, so twice that is ample.
# A buffer that keeps a serialized ~64 KiB frame for every dispatch it never delivers grows
# ~10 MiB per 2 s round here (over 150 MiB before the gateway's send timeout ends it).
GROWTH_BOUND = 100 << 20
# Past the queue bound the core cuts the stream (8-10 s measured alone, 15-32 s on a loaded
# 2-core host). The gateway's send timeout (30 s) would also cut it, but that bounds time, not
# memory: which of the two cut it is read from the core's own count of executions requeued
# because their stream overflowed, not from how long it took, which the box decides.
BIG = {"cpu_total": 1024, "cpu_available": 1024, "memory_total": 1 << 40, "memory_available": 1 << 40}

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(180)]


class StreamNotBounded(AssertionError):
    """The slow stream cost more memory, or lived longer, than the core's queue bound allows."""


@dataclass
class Watch:
    start_rss: int
    peak_rss: int = 0
    cut_after: float | None = None  # seconds from the start until the core saw the slow worker gone


@contextmanager
def watching(cluster: Cluster, pid: int, worker: str) -> Iterator[Watch]:
    """Samples the server's RSS and whether ``worker`` is connected until the block ends."""
    process = psutil.Process(pid)
    watch = Watch(start_rss=process.memory_info().rss)
    watch.peak_rss = watch.start_rss
    started, done = time.monotonic(), threading.Event()

    def sample() -> None:
        polls = 0
        while not done.wait(0.05):
            watch.peak_rss = max(watch.peak_rss, process.memory_info().rss)
            polls += 1
            if watch.cut_after is None and polls % 4 == 0 and not cluster.worker_connected(worker):
                watch.cut_after = time.monotonic() - started

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield watch
    finally:
        done.set()
        sampler.join(timeout=10)


def open_unread_stream(url: str, name: str, worker_token: str, session_token: str) -> socket.socket:
    """GET the SSE stream on a socket with a tiny receive window; read up to `connected`, then stop."""
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Before connect, so the window it advertises is small from the first segment on.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect((parts.hostname, parts.port))
    sock.sendall(
        (
            f"GET /workers/{name}/connect HTTP/1.1\r\nHost: {parts.hostname}\r\n"
            f"Authorization: Bearer {worker_token}\r\nX-Flux-Session: {session_token}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()
    )
    head = b""
    deadline = time.monotonic() + 10
    while b"event: connected" not in head:
        assert time.monotonic() < deadline, f"no `connected` event: {head[:500]!r}"
        chunk = sock.recv(256)
        assert chunk, f"the stream closed before `connected`: {head[:500]!r}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return sock


def test_a_stream_nobody_reads_is_bounded_and_cut_while_dispatch_flows_elsewhere(cluster: Cluster) -> None:
    worker_token = cluster.token(Role.WORKER)
    with httpx.Client(
        base_url=cluster.gateway_url,
        timeout=10,
        trust_env=False,
        headers={"Authorization": f"Bearer {worker_token}"},
    ) as http:
        answer = http.post("/workers/register", json={"name": "slow", "resources": BIG, "capacity": 1000})
        assert answer.status_code == 200, answer.text
        session_token = answer.json()["session_token"]
    slow = open_unread_stream(cluster.gateway_url, "slow", worker_token, session_token)
    try:
        assert cluster.worker_connected("slow")
        assert cluster.server is not None
        with watching(cluster, cluster.server.pid, "slow") as watch:
            # Everything goes to the slow worker first, round after round at each ack deadline, so
            # its queue passes the bound whatever the box's speed (with a reading worker already
            # there, how much reaches the slow one depends on how fast that one is).
            ids = [cluster.client.run_json("echo", INPUT).execution_id for _ in range(EXECUTIONS)]
            eventually(lambda: watch.cut_after is not None, timeout=60, what="the slow worker cut")
            cluster.start_worker("steady", "--capacity", "2")
            # Every one finishes: what went to the slow worker comes back and goes to the reading one.
            finished = cluster.wait_all(ids, timeout=60)
        assert [e.state for e in finished] == [control_pb2.EXECUTION_STATE_COMPLETED] * EXECUTIONS
        assert {json.loads(e.output_json)["worker"] for e in finished} == {"steady"}
        # The slow worker was cut (the sampler saw it gone) and the reading one was not.
        assert watch.cut_after is not None, "the slow worker was never disconnected"
        assert not cluster.worker_connected("slow") and cluster.worker_connected("steady")
        assert json.loads(cluster.run("echo", "after", timeout=10).output_json)["worker"] == "steady"
        growth = watch.peak_rss - watch.start_rss
        overflowed = cluster.client.status().counters.requeued["stream_overflowed"]
        if growth >= GROWTH_BOUND or not overflowed:
            raise StreamNotBounded(
                f"server RSS grew {growth / 2**20:.0f} MiB (bound {GROWTH_BOUND >> 20} MiB); the slow "
                f"worker was cut after {watch.cut_after:.1f} s, and {overflowed} executions were requeued "
                f"because its stream passed {MAX_BUFFERED_EVENTS} queued events (the core's cut: want > 0)"
            )
    finally:
        slow.close()
