"""Shared bench plumbing: machine description, percentiles, JSON output."""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

RESULTS = Path(__file__).parent / "results"


def machine() -> dict[str, object]:
    cpu_model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_model": cpu_model,
        "logical_cpus": psutil.cpu_count(logical=True),
        "memory_gib": round(psutil.virtual_memory().total / 1024**3, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "loopback_round_trip_us": round_trip_us(),
    }


def speed_s() -> float:
    """The box's speed: seconds a pure-Python loop of 10**7 additions takes (docs/benchmarks.md)."""
    started = time.perf_counter()
    total = 0
    for i in range(10**7):
        total += i
    return round(time.perf_counter() - started, 2)


# The far end of ``round_trip_us``: a second process echoing each byte back over loopback TCP.
_ECHO = """
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as s:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while byte := s.recv(1):
        s.sendall(byte)
"""


def round_trip_us(trips: int = 2000) -> float:
    """The box's wake-up cost: the median microseconds of a one-byte round trip over loopback TCP
    to a second process (docs/benchmarks.md).

    ``speed_s`` times Python alone, and two boxes equal by it ran the peers workload's sequential
    runs at 372 and 661 /s: every figure here moves messages between processes, and what a
    message costs there is the kernel waking the reader, which no loop of additions measures.
    """
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        echo = subprocess.Popen([sys.executable, "-c", _ECHO, str(listener.getsockname()[1])])
        try:
            connection = _accept_from(listener, echo)
            with connection:
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connection.settimeout(30)
                samples = []
                for _ in range(trips):
                    started = time.perf_counter()
                    try:  # an echo gone away reads as the end of its stream, or as a reset
                        connection.sendall(b"x")
                        answered = connection.recv(1) == b"x"
                    except ConnectionError:
                        answered = False
                    if not answered:
                        raise RuntimeError("the echo process went away")
                    samples.append(time.perf_counter() - started)
        finally:
            try:
                echo.wait(timeout=10)  # it ends when the connection closes
            except subprocess.TimeoutExpired:
                echo.kill()
                echo.wait()
    return round(statistics.median(samples) * 1e6, 1)


def _accept_from(listener: socket.socket, echo: subprocess.Popen[bytes]) -> socket.socket:
    """The echo process's connection; an echo that exits first, or never connects within 30 s,
    fails the measurement at once rather than leaving it waiting."""
    listener.settimeout(0.1)
    deadline = time.monotonic() + 30
    while True:
        try:
            return listener.accept()[0]
        except TimeoutError:
            if echo.poll() is not None:
                raise RuntimeError(
                    f"the echo process exited ({echo.returncode}) before it connected"
                ) from None
            if time.monotonic() > deadline:
                raise


def percentiles(samples: Sequence[float], unit_scale: float = 1000.0) -> dict[str, float]:
    """p50/p95/p99/min/max of seconds, scaled (default to milliseconds)."""
    ordered = sorted(samples)
    if not ordered:
        return {}

    def pick(q: float) -> float:
        index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
        return round(ordered[index] * unit_scale, 3)

    return {
        "n": len(ordered),
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "min": round(ordered[0] * unit_scale, 3),
        "max": round(ordered[-1] * unit_scale, 3),
        "mean": round(statistics.fmean(ordered) * unit_scale, 3),
    }


def write(name: str, result: dict[str, object]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    document = {
        "benchmark": name,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        **result,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(document, indent=2))
    return path
