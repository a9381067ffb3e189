"""The worker's batcher, and the transports' per-item answers, without a server.

The SSE transport's batched calls against a real HTTP server are tests/integration/test_batching.py.
"""

from __future__ import annotations

import asyncio

import pytest

from flux.errors import FailedPrecondition, FluxError, NotFound, Unavailable
from flux.worker import batching
from flux.worker.batching import Batcher
from flux.worker.transport import answers_from

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
