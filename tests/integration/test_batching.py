"""The SSE transport's batched claims and completions against a real HTTP server on 127.0.0.1 (an
aiohttp app that answers as the test says): arrays posted, answers read per item, and a gateway
without the batched routes, out of reach or not answering with an event stream (the batcher
itself is tests/unit/test_batching.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from flux.errors import FailedPrecondition, Unavailable, Unimplemented
from flux.worker.sse_transport import SseTransport
from flux.worker.transport import Outcome

pytestmark = [pytest.mark.integration, pytest.mark.timeout(10)]


@contextlib.asynccontextmanager
async def gateway(answer) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
    """A real HTTP server on 127.0.0.1 answering every request with ``answer(path, body)``."""

    async def handle(request: web.Request) -> web.Response:
        status, body = answer(request.path, await request.json() if request.can_read_body else None)
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_the_sse_transport_posts_arrays_and_reads_answers_per_item():
    seen: list[tuple[str, object]] = []

    def answer(path: str, body: list[dict]) -> tuple[int, object]:
        seen.append((path, body))
        return 200, [
            {"execution_id": body[0]["execution_id"], "ok": True, "code": "", "message": ""},
            {
                "execution_id": body[1]["execution_id"],
                "ok": False,
                "code": "FAILED_PRECONDITION",
                "message": "no",
            },
        ]

    async with gateway(answer) as url:
        transport = SseTransport([url])
        claims = await transport.claim_batch("w1", "token", [("e1", 1), ("e2", 2)])
        outcomes = [Outcome("e1", 1, '{"v":1}', None), Outcome("e2", 2, None, None)]
        results = await transport.complete_batch("w1", "token", outcomes, None)
        await transport.close()
    for answers in (claims, results):
        assert answers[0] is None and isinstance(answers[1], FailedPrecondition)
    assert seen[0] == (
        "/workers/w1/claims",
        [{"execution_id": "e1", "generation": 1}, {"execution_id": "e2", "generation": 2}],
    )
    assert seen[1][0] == "/workers/w1/completions"
    assert seen[1][1] == [
        {"execution_id": "e1", "generation": "1", "output_json": '{"v":1}'},
        {"execution_id": "e2", "generation": "2", "output_json": "null"},
    ]


@pytest.mark.parametrize("status", [404, 405])
async def test_a_gateway_without_the_batched_routes_is_unimplemented(status):
    def old_gateway(path: str, body: object) -> tuple[int, object]:
        code = "NOT_FOUND" if status == 404 else "UNIMPLEMENTED"
        return status, {"error": {"code": code, "message": "Not Found"}}

    async with gateway(old_gateway) as url:
        transport = SseTransport([url])
        with pytest.raises(Unimplemented):
            await transport.claim_batch("w1", "token", [("e1", 1)])
        await transport.close()


async def test_a_gateway_that_cannot_be_reached_is_unavailable():
    async with gateway(lambda path, body: (200, [])) as url:
        pass  # closed again: nothing listens on its port now
    transport = SseTransport([url])
    with pytest.raises(Unavailable, match="cannot reach the gateway"):
        await transport.claim_batch("w1", "token", [("e1", 1)])
    await transport.close()


async def test_a_connect_answered_without_an_event_stream_is_unavailable():
    # Something other than the gateway (a proxy's page, a wrong URL) answering 200 with JSON.
    async with gateway(lambda path, body: (200, {"hello": "world"})) as url:
        transport = SseTransport([url])
        with pytest.raises(Unavailable, match="not an event stream"):
            async for _ in transport.connect("w1", "token"):
                pass
        await transport.close()
