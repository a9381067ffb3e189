"""A sync body run in its own process says when it starts: until then the worker heartbeats for the
starting process (bounded by a grace), then once more at the start, each without details, so the
server's heartbeat window counts from the body's start, not from a claim that a slow child start
(Python, Flux, the workflow's module) may have used up; and the server keeps the last details
through such beats (what a retry resumes from). Pure: the child's lines fed to a
real ``asyncio.StreamReader``, a fake heartbeat call, the dispatcher over its in-memory store."""

from __future__ import annotations

import asyncio
import json

import pytest

from flux.domain.execution import State, WorkflowRef
from flux.domain.policy import Policy
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.worker.child_runner import answers
from flux.worker.heartbeats import Heartbeats
from flux.worker.transport import Dispatch
from tests.unit.harness import Flux, settled

pytestmark = pytest.mark.timeout(10)


def _dispatch(heartbeat_interval: float) -> Dispatch:
    ref = WorkflowRef("beating", 1, "hash", "beating")
    return Dispatch(
        "e1", 1, 3, "null", ref, (), ResourceRequest(), timeout=60, heartbeat_interval=heartbeat_interval
    )


async def _sent(lines: list[list[object]], heartbeat_interval: float, waiting: object = None) -> list[str]:
    """The details of each heartbeat the worker sent while reading ``lines`` from a child, in order;
    ``waiting``: details a body gave that wait for their interval when the child's lines come."""
    sent: list[tuple[str, int, str]] = []

    async def send(execution_id: str, generation: int, details_json: str) -> None:
        sent.append((execution_id, generation, details_json))

    beats = Heartbeats(send, _dispatch(heartbeat_interval))
    beats.starting()  # as in_child does once the child is spawned
    if waiting is not None:
        beats.sent_at = beats.loop.time()  # a beat just went: these wait for the interval
        beats(waiting)
    stdout = asyncio.StreamReader()
    stdout.feed_data(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    stdout.feed_eof()
    answer = await answers(stdout, beats)
    await beats.close()  # sends the details still waiting, as at the end of a body
    await asyncio.sleep(0)  # the sends created last run now
    assert answer == ("8", None)
    assert {(e, g) for e, g, _ in sent} <= {("e1", 3)}  # each quotes its dispatch's generation
    return [details for _, _, details in sent]


async def test_the_body_s_start_is_one_heartbeat_without_details_ahead_of_the_body_s_own() -> None:
    sent = await _sent([["started"], ["beat", "7"], ["ok", "8"]], heartbeat_interval=0.5)
    assert sent == ["", "7"]


async def test_the_start_s_heartbeat_leaves_the_details_waiting_to_go_as_usual() -> None:
    sent = await _sent([["started"], ["ok", "8"]], heartbeat_interval=0.5, waiting={"step": 5})
    assert sent == ["", json.dumps({"step": 5})]


async def test_without_a_heartbeat_timeout_the_start_sends_nothing() -> None:
    # Nobody watches a silence then: a sync body with only a timeout runs in a child too.
    assert await _sent([["started"], ["ok", "8"]], heartbeat_interval=0) == []


async def test_while_the_child_starts_the_worker_beats_for_it_each_interval_and_stops_at_the_start() -> None:
    sent: list[str] = []
    first = asyncio.Event()

    async def send(execution_id: str, generation: int, details_json: str) -> None:
        sent.append(details_json)
        first.set()

    beats = Heartbeats(send, _dispatch(0.05))
    stdout = asyncio.StreamReader()
    beats.starting()
    reading = asyncio.create_task(answers(stdout, beats))
    await asyncio.wait_for(first.wait(), 5)  # a slow start: one interval went by, not started yet
    stdout.feed_data(b'["started"]\n')
    assert beats.start is not None
    await asyncio.wait([beats.start], timeout=5)
    assert beats.start.cancelled()  # read: the starting beats ended there
    stdout.feed_data(b'["beat", "7"]\n["ok", "8"]\n')
    stdout.feed_eof()
    assert await asyncio.wait_for(reading, 5) == ("8", None)
    await beats.close()
    await asyncio.sleep(0)
    # One or more while it started, one at its start, then the body's details.
    assert sent[:-1] == [""] * (len(sent) - 1) and len(sent) >= 3
    assert sent[-1] == "7"


async def test_a_child_that_never_starts_its_body_is_spoken_for_only_within_the_start_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Heartbeats, "START_GRACE", 0.2)
    sent: list[str] = []

    async def send(execution_id: str, generation: int, details_json: str) -> None:
        sent.append(details_json)

    beats = Heartbeats(send, _dispatch(0.05))
    beats.starting()
    assert beats.start is not None
    await asyncio.wait_for(beats.start, 5)  # it gives up by itself: the server's window runs again
    await asyncio.sleep(0)
    assert sent == [""] * 4
    await beats.close()


async def test_a_child_that_ends_without_a_result_is_none_after_its_start() -> None:
    async def send(execution_id: str, generation: int, details_json: str) -> None:
        pass

    stdout = asyncio.StreamReader()
    stdout.feed_data(b'["started"]\n')
    stdout.feed_eof()
    beats = Heartbeats(send, _dispatch(0.5))
    assert await answers(stdout, beats) is None
    await beats.close()


async def test_the_server_keeps_the_last_details_and_renews_the_window_on_a_beat_without_details() -> None:
    flux = await Flux().start()
    try:
        declared = WorkflowRecord(
            "job", 0, "", "main", ResourceRequest(cpu=1), {}, 1, policy=Policy(heartbeat_timeout=30.0)
        )
        await flux.d.register_workflows("job.py", "# job\n", [declared])
        w = await flux.worker()
        execution_id = await flux.run()
        assert w.claim(execution_id).state is State.RUNNING
        generation = w.generation(execution_id)
        await flux.d.heartbeat(w.name, w.token, execution_id, generation, '{"step": 5}')
        flux.clock.advance(20)
        await flux.d.heartbeat(w.name, w.token, execution_id, generation, "")  # the body's start
        assert flux.get(execution_id).heartbeat == '{"step": 5}'
        flux.expire(20)  # 40 s since the claim, 20 since the last beat: alive
        await settled()
        assert not flux.d.timing.is_stopping(flux.get(execution_id))
        flux.expire(11)  # silent for 31 s: the window is renewed, not disabled
        await settled()
        assert flux.d.timing.is_stopping(flux.get(execution_id))
        assert flux.get(execution_id).heartbeat == '{"step": 5}'
    finally:
        await flux.d.stop()


async def test_closing_waits_for_the_details_call_already_on_its_way() -> None:
    # A body that beats once and fails at once: its details' call left before the body ended. The
    # result must not overtake it (a result read first ends the attempt, and the details would be
    # refused as stale), so closing waits for that call too, not only for details still waiting.
    arrived = asyncio.Event()
    delivered: list[str] = []

    async def send(execution_id: str, generation: int, details_json: str) -> None:
        await arrived.wait()
        delivered.append(details_json)

    beats = Heartbeats(send, _dispatch(0.5))
    beats({"reached": 1})  # the first beat goes at once
    await asyncio.sleep(0.01)
    assert beats.sending is not None and not beats.sending.done()
    closing = asyncio.ensure_future(beats.close())
    await asyncio.sleep(0.05)
    assert not closing.done()  # the result waits behind the details' call
    arrived.set()
    await closing
    assert delivered == ['{"reached": 1}']
