"""The worker's probe endpoint answers by a table, and over a real socket (issue 40)."""

from __future__ import annotations

import asyncio

import pytest

from flux.worker.health import HealthBindError, HealthServer


@pytest.mark.parametrize(
    ("method", "path", "ready", "status"),
    [
        pytest.param("GET", "/healthz", False, 200, id="alive while not connected"),
        pytest.param("GET", "/readyz", True, 200, id="ready while connected"),
        pytest.param("GET", "/readyz", False, 503, id="not ready while disconnected or draining"),
        pytest.param("HEAD", "/readyz?verbose", True, 200, id="HEAD and a query"),
        pytest.param("POST", "/readyz", True, 405, id="only GET and HEAD"),
        pytest.param("GET", "/", True, 404, id="anything else"),
    ],
)
def test_answers(method: str, path: str, ready: bool, status: int) -> None:
    assert HealthServer(lambda: ready).answer(method, path)[0] == status


async def _get(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer


async def test_over_a_socket_and_a_taken_port_names_the_flag() -> None:
    state = {"ready": False}
    server = HealthServer(lambda: state["ready"])
    port = await server.start("127.0.0.1", 0)
    try:
        assert (await _get(port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 503 ")
        state["ready"] = True
        answer = await _get(port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"dispatch stream connected\n")
        assert (await _get(port, b"\xff\xfe garbage\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        with pytest.raises(HealthBindError, match=f"--health-port {port} on 127.0.0.1 cannot be bound"):
            await HealthServer(lambda: True).start("127.0.0.1", port)
    finally:
        await server.close()
