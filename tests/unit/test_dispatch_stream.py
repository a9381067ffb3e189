"""A Connect stream's writer (flux/server/dispatch_stream.py): what reaches the wire, in what order, and how it ends.

The context is a stand-in that records writes and can hold one in flight; the
real grpc.aio and in-process paths are exercised by the integration tests.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from flux.dispatcher.state.session import Ping, Scheduled, Session, Stop
from flux.errors import Unavailable
from flux.server.dispatch_stream import DispatchStream
from tests.unit.test_dispatch_batches import scheduled


class Context:
    def __init__(self) -> None:
        self.written: list[tuple[str, int]] = []
        self.hold: asyncio.Event | None = None
        self.holding = asyncio.Event()

    async def write(self, message) -> None:  # type: ignore[no-untyped-def]
        kind = message.WhichOneof("event")
        count = len(message.executions_scheduled.executions) if kind == "executions_scheduled" else 1
        self.written.append((kind, count))
        if self.hold is not None:
            self.holding.set()
            await self.hold.wait()


class Dispatcher:
    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure

    async def with_input(self, execution):  # type: ignore[no-untyped-def]
        if self.failure is not None:
            raise self.failure
        return replace(execution, input_json='"loaded"')


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_what_waited_before_the_stream_opened_goes_first_and_together() -> None:
    session, context = Session("w", "grpc", {}), Context()
    for n in (1, 2, 3):
        session.push(scheduled(n))
    run = asyncio.ensure_future(DispatchStream(Dispatcher(), session, context, batched=True).run())  # type: ignore[arg-type]
    await _settle()
    assert context.written == [("executions_scheduled", 3)]
    session.close()
    await asyncio.wait_for(run, 5)


async def test_events_pushed_during_a_write_leave_in_the_next_one_in_order() -> None:
    session, context = Session("w", "grpc", {}), Context()
    context.hold = asyncio.Event()
    run = asyncio.ensure_future(DispatchStream(Dispatcher(), session, context, batched=True).run())  # type: ignore[arg-type]
    session.push(scheduled(1))
    await asyncio.wait_for(context.holding.wait(), 5)  # that write is in flight
    session.push(scheduled(2))
    session.push(scheduled(3))
    session.push(Stop("e1", 1, "cancelled"))
    session.push(Ping(1.0))
    await _settle()
    assert context.written == [("execution_scheduled", 1)]  # one write in flight at a time
    context.hold.set()
    await _settle()
    assert context.written == [
        ("execution_scheduled", 1),
        ("executions_scheduled", 2),
        ("execution_cancelled", 1),
        ("ping", 1),
    ]
    session.close()
    await asyncio.wait_for(run, 5)


async def test_the_close_ends_the_stream_and_stops_a_write_in_flight() -> None:
    session, context = Session("w", "grpc", {}), Context()
    context.hold = asyncio.Event()  # never released
    run = asyncio.ensure_future(DispatchStream(Dispatcher(), session, context, batched=False).run())  # type: ignore[arg-type]
    session.push(scheduled(1))
    await asyncio.wait_for(context.holding.wait(), 5)
    session.close()
    await asyncio.wait_for(run, 5)  # ends although the write never finished
    await _settle()
    assert not [t for t in asyncio.all_tasks() if "_drain" in repr(t)]


async def test_an_input_that_cannot_be_read_ends_the_stream_with_that_error() -> None:
    session, context = Session("w", "grpc", {}), Context()
    big = scheduled(1, input_json="")  # its input waits in the store
    session.push(big)
    stream = DispatchStream(Dispatcher(Unavailable("the store is down")), session, context, batched=True)  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match="the store is down"):
        await asyncio.wait_for(stream.run(), 5)
    assert context.written == []


async def test_an_input_read_from_the_store_is_what_goes_out() -> None:
    session, context = Session("w", "grpc", {}), Context()
    messages = []

    async def write(message) -> None:  # type: ignore[no-untyped-def]
        messages.append(message)

    context.write = write  # type: ignore[method-assign]
    session.push(Scheduled(scheduled(1, input_json="").execution, scheduled(1).requests))
    run = asyncio.ensure_future(DispatchStream(Dispatcher(), session, context, batched=False).run())  # type: ignore[arg-type]
    await _settle()
    assert messages[0].execution_scheduled.input_json == '"loaded"'
    session.close()
    await asyncio.wait_for(run, 5)
