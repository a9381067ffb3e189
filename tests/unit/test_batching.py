"""The worker's batcher, and the transports' per-item answers, without a server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from flux.errors import FailedPrecondition, FluxError, NotFound, Unavailable, Unimplemented
from flux.worker import batching
from flux.worker.batching import Batcher
from flux.worker.sse_transport import SseTransport
from flux.worker.transport import Outcome, answers_from

pytestmark = pytest.mark.timeout(10)


class Server:
    """A send function that records each call's items and answers from ``refuse``."""

    def __init__(self, refuse: dict[str, FluxError] | None = None, fail: Exception | None = None):
        self.calls: list[list[str]] = []
        self.refuse = refuse or {}
        self.fail = fail
        self.gate: asyncio.Event | None = None

    async def send(self, items: list[str]) -> list[FluxError | None]:
        self.calls.append(items)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return [self.refuse.get(item) for item in items]


async def outcome(call) -> FluxError | None:  # type: ignore[no-untyped-def]
    try:
        await call
    except FluxError as exc:
        return exc
    return None


async def test_items_ready_together_go_in_one_call_answered_each_in_order():
    server = Server(refuse={"b": FailedPrecondition("stale generation")})
    batcher: Batcher[str] = Batcher(server.send)
    answers = await asyncio.gather(*(outcome(batcher.submit(i)) for i in "abc"))
    assert server.calls == [["a", "b", "c"]]
    assert answers[0] is None and answers[2] is None
    assert isinstance(answers[1], FailedPrecondition)


async def test_items_that_arrive_during_a_call_go_in_the_next_one():
    server = Server()
    server.gate = asyncio.Event()
    batcher: Batcher[str] = Batcher(server.send)
    first = asyncio.create_task(batcher.submit("a"))
    while not server.calls:
        await asyncio.sleep(0)
    later = [asyncio.create_task(batcher.submit(i)) for i in "bc"]
    await asyncio.sleep(0)
    assert server.calls == [["a"]]  # one call in flight at a time
    server.gate.set()
    await asyncio.gather(first, *later)
    assert server.calls == [["a"], ["b", "c"]]


async def test_a_failed_call_fails_every_item_in_it():
    batcher: Batcher[str] = Batcher(Server(fail=Unavailable("gone")).send)
    answers = await asyncio.gather(*(outcome(batcher.submit(i)) for i in "ab"))
    assert [type(a) for a in answers] == [Unavailable, Unavailable]


async def test_a_short_answer_is_retried_for_every_item_never_taken_as_accepted():
    async def short(items: list[str]) -> list[FluxError | None]:
        return [None]

    batcher: Batcher[str] = Batcher(short)
    answers = await asyncio.gather(*(outcome(batcher.submit(i)) for i in "ab"))
    assert [type(a) for a in answers] == [Unavailable, Unavailable]


async def test_batches_are_cut_by_count_and_a_large_item_goes_alone(monkeypatch):
    monkeypatch.setattr(batching, "MAX_ITEMS", 2)
    monkeypatch.setattr(batching, "MAX_BYTES", 10)
    server = Server()
    batcher: Batcher[str] = Batcher(server.send, len)
    await asyncio.gather(*(batcher.submit(i) for i in ["a", "b", "c", "x" * 50, "d"]))
    assert server.calls == [["a", "b"], ["c"], ["x" * 50], ["d"]]


async def test_an_item_whose_caller_gave_up_is_not_sent():
    server = Server()
    batcher: Batcher[str] = Batcher(server.send)
    gone = asyncio.create_task(batcher.submit("gone"))
    kept = asyncio.create_task(batcher.submit("kept"))
    await asyncio.sleep(0)
    gone.cancel()
    await kept
    assert server.calls == [["kept"]]


def test_an_item_the_server_left_unanswered_is_retried_not_accepted():
    answers = answers_from(3, [(True, "", ""), (False, "NOT_FOUND", "no such execution")])
    assert answers[0] is None
    assert isinstance(answers[1], NotFound) and str(answers[1]) == "no such execution"
    assert isinstance(answers[2], Unavailable)


def test_an_unknown_status_name_is_retried():
    [answer] = answers_from(1, [(False, "SOMETHING_NEW", "later")])
    assert isinstance(answer, Unavailable)


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
