"""Dispatches that wait together leave together: the session's batches and their stream messages."""

from __future__ import annotations

import asyncio

from flux.dispatcher.session import Cancelled, Ping, Scheduled, Session
from flux.domain.execution import Execution, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.server import convert


def scheduled(n: int, input_json: str = "1") -> Scheduled:
    execution = Execution(
        execution_id=f"e{n}",
        workflow=WorkflowRef("wf", 1, "0" * 64, "wf"),
        seq=n,
        input_json=input_json,
        max_attempts=1,
        generation=n,
    )
    return Scheduled(execution, ResourceRequest())


async def test_a_reader_gets_everything_waiting_in_order_up_to_its_limit() -> None:
    session = Session("w", "grpc", {})
    events = [scheduled(1), scheduled(2), Cancelled("e1", 1, "cancelled"), scheduled(3), scheduled(4)]
    for event in events:
        session.push(event)
    batches = session.batches(4)
    assert await anext(batches) == events[:4]
    assert await anext(batches) == events[4:]
    session.push(scheduled(5))
    session.close()
    assert [b async for b in batches] == []  # closing drops what the reader never took


async def test_a_batch_never_waits_to_fill() -> None:
    session = Session("w", "grpc", {})
    batches = session.batches(256)
    reader = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0)
    session.push(scheduled(1))
    assert await asyncio.wait_for(reader, 5) == [scheduled(1)]


async def test_a_reader_of_one_at_a_time_gets_them_singly() -> None:
    session = Session("w", "grpc", {})
    session.push(scheduled(1))
    session.push(scheduled(2))
    batches = session.batches(1)
    assert await anext(batches) == [scheduled(1)]
    assert await anext(batches) == [scheduled(2)]


def kinds(messages) -> list[tuple[str, int]]:
    out = []
    for m in messages:
        kind = m.WhichOneof("event")
        count = len(m.executions_scheduled.executions) if kind == "executions_scheduled" else 1
        out.append((kind, count))
    return out


def test_consecutive_dispatches_share_one_message_and_other_events_keep_their_place() -> None:
    events = [
        scheduled(1),
        scheduled(2),
        Cancelled("e1", 1, "x"),
        scheduled(3),
        Ping(1.0),
        scheduled(4),
        scheduled(5),
    ]
    messages = convert.events_to_proto(events, batched=True)
    assert kinds(messages) == [
        ("executions_scheduled", 2),
        ("execution_cancelled", 1),
        ("execution_scheduled", 1),
        ("ping", 1),
        ("executions_scheduled", 2),
    ]
    ids = [s.execution_id for s in messages[0].executions_scheduled.executions]
    assert ids == ["e1", "e2"]
    assert messages[0].executions_scheduled.executions[1] == convert.scheduled_to_proto(events[1])


def test_without_batching_every_event_is_its_own_message() -> None:
    events = [scheduled(1), scheduled(2), scheduled(3)]
    assert kinds(convert.events_to_proto(events, batched=False)) == [("execution_scheduled", 1)] * 3


def test_large_inputs_split_a_batch_below_the_message_cap() -> None:
    big = "x" * (convert.BATCH_INPUT_BYTES // 2 - 10)
    events = [scheduled(i, f'"{big}"') for i in range(5)]
    messages = convert.events_to_proto(events, batched=True)
    assert kinds(messages) == [
        ("executions_scheduled", 2),
        ("executions_scheduled", 2),
        ("execution_scheduled", 1),
    ]
    assert all(m.ByteSize() < 16 << 20 for m in messages)


def test_the_gateway_writes_a_batch_as_one_sse_event_per_execution() -> None:
    import itertools

    from gateway.stream import _frames

    batch = convert.events_to_proto([scheduled(1), scheduled(2), scheduled(3)], batched=True)[0]
    ids = itertools.count(7)
    written = _frames(batch, ids)
    assert isinstance(written, bytes)  # one write for the whole batch
    frames = [f for f in written.decode().split("\r\n\r\n") if f]
    assert [f.splitlines()[:2] for f in frames] == [
        [f"id: {i}", "event: execution_scheduled"] for i in (7, 8, 9)
    ]
    assert ['"execution_id":"e1"' in frames[0], '"execution_id":"e3"' in frames[2]] == [True, True]
    assert next(ids) == 10
