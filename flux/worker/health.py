"""The worker's health endpoint (``flux start worker … --health-port PORT``), for kubelet probes.

``GET /healthz`` answers 200 while the worker's event loop answers at all (liveness: a
worker that cannot answer this is wedged, and a restart is the cure). ``GET /readyz``
answers 200 only while the dispatch stream is connected and the worker is not draining,
503 otherwise (readiness: a worker that waits for its server is alive, so it is not
restarted, but it is not ready). An HTTP probe costs the worker one short connection;
an exec probe would start a Python interpreter in the pod every period.

A few lines of HTTP over ``asyncio.start_server`` rather than the gateway's
FastAPI and uvicorn: a worker never imports those, and a probe needs two fixed answers.
Each connection is bounded (a head of 8 KiB within 5 s), so a stray client cannot hold
the worker's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

HEAD_LIMIT = 8 * 1024
HEAD_TIMEOUT = 5.0

_REASONS = {
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    400: "Bad Request",
    503: "Service Unavailable",
}


class HealthBindError(OSError):
    """The --health-port cannot be bound (taken, or a host that is not ours)."""


class HealthServer:
    """Answers /healthz and /readyz; ``ready`` says whether the dispatch stream is connected now."""

    def __init__(self, ready: Callable[[], bool]):
        self._ready = ready
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Bind ``host:port`` (0 picks one) and return the bound port; OSError names the flag."""
        try:
            self._server = await asyncio.start_server(self._answer, host, port, limit=HEAD_LIMIT)
        except OSError as exc:
            raise HealthBindError(
                f"--health-port {port} on {host} cannot be bound: {exc.strerror or exc} (pick another port)"
            ) from None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def answer(self, method: str, path: str) -> tuple[int, str]:
        """(status, body) for one request: pure, so the table is tested without sockets."""
        path = path.split("?", 1)[0]
        if path not in ("/healthz", "/readyz"):
            return 404, "not found: GET /healthz (alive) or /readyz (dispatch stream connected)\n"
        if method not in ("GET", "HEAD"):
            return 405, "only GET and HEAD\n"
        if path == "/healthz":
            return 200, "ok\n"
        if self._ready():
            return 200, "ready: dispatch stream connected\n"
        return 503, "not ready: dispatch stream not connected (or draining)\n"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body, method = 400, "bad request\n", "GET"
            with contextlib.suppress(ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
                method, path, _version = head.split(b"\r\n", 1)[0].decode("ascii").split(" ", 2)
                status, body = self.answer(method, path)
            payload = body.encode()
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + (b"" if method == "HEAD" else payload)
            )
            await writer.drain()
        except (TimeoutError, OSError):
            pass  # a client that went away or sent nothing: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
