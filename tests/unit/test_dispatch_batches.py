"""Dispatches that wait together leave together: what the session hands its reader, and the stream messages."""

from __future__ import annotations

from flux.dispatcher.state.session import Event, Ping, Scheduled, Session, Stop
from flux.domain.execution import Execution, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.server import worker_convert


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


def test_a_reader_takes_everything_waiting_in_order_up_to_its_limit() -> None:
    session = Session("w", "grpc", {})
    events = [scheduled(1), scheduled(2), Stop("e1", 1, "cancelled"), scheduled(3), scheduled(4)]
    for event in events:
        session.push(event)
    assert session.take(4) == events[:4]
    assert session.take(4) == events[4:]
    assert session.take(4) == []
    session.push(scheduled(5))
    session.close()
    assert session.take(4) == []  # closing drops what the reader never took


def test_the_reader_is_woken_when_an_event_lands_on_an_empty_queue_and_at_the_close() -> None:
    session = Session("w", "grpc", {})
    wakes: list[list[Event]] = []
    session.attach(lambda: wakes.append(session.take(256)))
    assert wakes == []  # nothing waiting, nothing to say
    session.push(scheduled(1))
    assert wakes == [[scheduled(1)]]  # no waiting for a batch to fill


def test_events_that_arrive_while_the_reader_writes_wait_for_its_next_take() -> None:
    session = Session("w", "grpc", {})
    woken = []
    session.attach(lambda: woken.append(True))
    session.push(scheduled(1))  # wakes the reader, which has not taken it yet (it is writing)
    session.push(scheduled(2))
    session.push(scheduled(3))
    assert len(woken) == 1
    assert session.take(2) == [scheduled(1), scheduled(2)]
    assert session.take(2) == [scheduled(3)]
    session.push(scheduled(4))  # the queue was empty again: a new wake
    assert len(woken) == 2


def test_a_reader_that_attaches_late_is_woken_for_what_came_before() -> None:
    session = Session("w", "grpc", {})
    session.push(scheduled(1))
    woken = []
    session.attach(lambda: woken.append(session.take(1)))
    assert woken == [[scheduled(1)]]
    closed = Session("w", "grpc", {})
    closed.close()
    told = []
    closed.attach(lambda: told.append(closed.closed))
    assert told == [True]


def test_the_close_wakes_the_reader_once() -> None:
    session = Session("w", "grpc", {})
    woken = []
    session.attach(lambda: woken.append(session.closed))
    session.close()
    session.close()
    session.push(scheduled(1))  # after the close: dropped, nobody woken
    assert woken == [True]


def test_a_reader_that_falls_too_far_behind_is_cut_off() -> None:
    session = Session("w", "grpc", {}, limit=3)
    woken = []
    session.attach(lambda: woken.append(session.closed))
    for n in range(4):
        session.push(scheduled(n))
    assert session.overflowed and session.closed
    assert woken == [False, True]  # the first event, then the close
    assert session.take(10) == []


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
        Stop("e1", 1, "x"),
        scheduled(3),
        Ping(1.0),
        scheduled(4),
        scheduled(5),
    ]
    messages = worker_convert.events_to_proto(events, batched=True)
    assert kinds(messages) == [
        ("executions_scheduled", 2),
        ("execution_cancelled", 1),
        ("execution_scheduled", 1),
        ("ping", 1),
        ("executions_scheduled", 2),
    ]
    ids = [s.execution_id for s in messages[0].executions_scheduled.executions]
    assert ids == ["e1", "e2"]
    assert messages[0].executions_scheduled.executions[1] == worker_convert.scheduled_to_proto(events[1])


def test_without_batching_every_event_is_its_own_message() -> None:
    events = [scheduled(1), scheduled(2), scheduled(3)]
    assert kinds(worker_convert.events_to_proto(events, batched=False)) == [("execution_scheduled", 1)] * 3


def test_large_inputs_split_a_batch_below_the_message_cap() -> None:
    big = "x" * (worker_convert.BATCH_INPUT_BYTES // 2 - 10)
    events = [scheduled(i, f'"{big}"') for i in range(5)]
    messages = worker_convert.events_to_proto(events, batched=True)
    assert kinds(messages) == [
        ("executions_scheduled", 2),
        ("executions_scheduled", 2),
        ("execution_scheduled", 1),
    ]
    assert all(m.ByteSize() < 16 << 20 for m in messages)


def test_the_gateway_writes_a_batch_as_one_sse_event_per_execution() -> None:
    import itertools

    from gateway.wire.stream import _frames

    batch = worker_convert.events_to_proto([scheduled(1), scheduled(2), scheduled(3)], batched=True)[0]
    ids = itertools.count(7)
    written = _frames(batch, ids)
    assert isinstance(written, bytes)  # one write for the whole batch
    frames = [f for f in written.decode().split("\r\n\r\n") if f]
    assert [f.splitlines()[:2] for f in frames] == [
        [f"id: {i}", "event: execution_scheduled"] for i in (7, 8, 9)
    ]
    assert ['"execution_id":"e1"' in frames[0], '"execution_id":"e3"' in frames[2]] == [True, True]
    assert next(ids) == 10
