"""The worker's WorkerCalls stream against a real grpc.aio server on 127.0.0.1: a stream that the
server ends or stops answering fails the calls waiting on it as UNAVAILABLE (the runtime retries),
and the next call opens a new stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from flux.errors import PermissionDenied, Unavailable
from flux.v1 import worker_pb2, worker_pb2_grpc
from flux.worker.call_stream import CallStream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


class Server(worker_pb2_grpc.WorkerServiceServicer):
    """Answers each claims call with one ok item; call N of ``behaviour`` decides otherwise."""

    def __init__(self, behaviour: dict[int, str]):
        self.behaviour = behaviour
        self.calls = 0
        self.streams = 0

    async def WorkerCalls(self, requests, context):  # type: ignore[no-untyped-def]
        self.streams += 1
        async for call in requests:
            self.calls += 1
            what = self.behaviour.get(self.calls, "answer")
            if what == "end":
                return  # the server ends the stream with this call unanswered
            if what == "abort":
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not yours")
            if what == "silent":
                continue
            answers = [worker_pb2.ItemAnswer(execution_id=i.execution_id, ok=True) for i in call.claims.items]
            yield worker_pb2.WorkerCallsResponse(
                call_id=call.call_id, claims=worker_pb2.ClaimBatchResponse(answers=answers)
            )


async def serve(behaviour: dict[int, str]) -> tuple[grpc.aio.Server, Server, str]:
    server, servicer = grpc.aio.server(), Server(behaviour)
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, servicer, f"127.0.0.1:{port}"


def claim(execution_id: str) -> worker_pb2.WorkerCallsRequest:
    items = [worker_pb2.ClaimItem(execution_id=execution_id, generation=1)]
    return worker_pb2.WorkerCallsRequest(claims=worker_pb2.ClaimBatchRequest(name="w", items=items))


async def with_stream(behaviour: dict[int, str]) -> AsyncIterator[tuple[CallStream, Server]]:
    server, servicer, address = await serve(behaviour)
    channel = grpc.aio.insecure_channel(address)
    stub = worker_pb2_grpc.WorkerServiceStub(channel)
    stream = CallStream(lambda: stub.WorkerCalls())
    try:
        yield stream, servicer
    finally:
        stream.close()
        await channel.close()
        await server.stop(None)


async def test_a_stream_the_server_ends_fails_its_call_and_the_next_call_opens_another() -> None:
    async for stream, servicer in with_stream({2: "end"}):
        first = await stream.call(claim("e1"), timeout=5)
        assert [a.execution_id for a in first.claims.answers] == ["e1"]
        with pytest.raises(Unavailable, match="ended the call stream"):
            await stream.call(claim("e2"), timeout=5)
        third = await stream.call(claim("e3"), timeout=5)
        assert [a.ok for a in third.claims.answers] == [True]
        assert servicer.streams == 2


async def test_a_refusal_of_the_whole_stream_reaches_the_caller_as_its_error() -> None:
    async for stream, _ in with_stream({1: "abort"}):
        with pytest.raises(PermissionDenied, match="not yours"):
            await stream.call(claim("e1"), timeout=5)


async def test_a_stream_that_stops_answering_is_dropped_after_the_timeout() -> None:
    async for stream, servicer in with_stream({1: "silent"}):
        with pytest.raises(Unavailable, match="no answer on the call stream within 0.5s"):
            await stream.call(claim("e1"), timeout=0.5)
        answer = await stream.call(claim("e2"), timeout=5)  # on a new stream
        assert [a.execution_id for a in answer.claims.answers] == ["e2"]
        assert servicer.streams == 2


async def test_calls_in_flight_together_each_get_their_own_answer() -> None:
    async for stream, _ in with_stream({}):
        answers = await asyncio.gather(*(stream.call(claim(f"e{i}"), timeout=5) for i in range(20)))
        assert [a.claims.answers[0].execution_id for a in answers] == [f"e{i}" for i in range(20)]


async def test_a_stream_closed_before_it_started_fails_its_call_instead_of_waiting_forever() -> None:
    # grpc.aio's first write waits for the call to start, on an event nothing sets when the call
    # ends first. A worker whose replica was killed under load moved to the other replica (which
    # closes the old call stream) while its first write there waited: its results never left it.
    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts the connection, never speaks HTTP/2: the call never starts

    listener = await asyncio.start_server(mute, "127.0.0.1", 0)
    address = f"127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    channel = grpc.aio.insecure_channel(address)
    stub = worker_pb2_grpc.WorkerServiceStub(channel)
    stream = CallStream(lambda: stub.WorkerCalls())
    try:
        call = asyncio.ensure_future(stream.call(claim("e1"), timeout=20))
        await asyncio.sleep(0.5)
        assert not call.done()  # waiting for the call to start
        stream.close()  # as the worker does when it moves to another server
        with pytest.raises(Unavailable):
            await asyncio.wait_for(call, 5)
    finally:
        stream.close()
        await channel.close()
        listener.close()


async def test_a_stream_to_a_server_that_is_gone_fails_each_call_and_opens_a_new_stream_each_time() -> None:
    server, _, address = await serve({})
    await server.stop(None)  # nothing listens there now: each call fails as it starts
    channel = grpc.aio.insecure_channel(address)
    stub = worker_pb2_grpc.WorkerServiceStub(channel)
    opened = 0

    def open_call() -> grpc.aio.StreamStreamCall:
        nonlocal opened
        opened += 1
        return stub.WorkerCalls()

    stream = CallStream(open_call)
    try:
        for execution_id in ("e1", "e2"):
            with pytest.raises(Unavailable):
                await asyncio.wait_for(stream.call(claim(execution_id), timeout=5), 10)
        assert opened == 2  # the failed stream was not reused
    finally:
        stream.close()
        await channel.close()
