"""The in-process channel behaves like a grpc.aio one for the stubs and servicers that use it."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from flux.server.local import LocalRegistry
from flux.v1 import worker_pb2, worker_pb2_grpc


class Servicer(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self) -> None:
        self.stream_closed = asyncio.Event()
        self.metadata: tuple = ()

    async def Claim(self, request, context):  # type: ignore[no-untyped-def]
        self.metadata = tuple(context.invocation_metadata())
        if request.execution_id == "missing":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such execution")
        if request.execution_id == "slow":
            await asyncio.sleep(10)
        if request.execution_id == "broken":
            raise RuntimeError("bug")
        return worker_pb2.ClaimResponse()

    async def Connect(self, request, context):  # type: ignore[no-untyped-def]
        try:
            yield worker_pb2.WorkerEvent(connected=worker_pb2.Connected(worker_name=request.name))
            if request.session_token == "refuse":
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, "bad token")
            await asyncio.sleep(10)
        finally:
            self.stream_closed.set()


@pytest.fixture
def setup() -> tuple[Servicer, worker_pb2_grpc.WorkerServiceStub]:
    servicer, registry = Servicer(), LocalRegistry()
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, registry)  # type: ignore[arg-type]
    return servicer, worker_pb2_grpc.WorkerServiceStub(registry.channel())


async def test_unary_calls_answer_abort_and_time_out_as_grpc_does(setup) -> None:
    servicer, stub = setup
    assert await stub.Claim(worker_pb2.ClaimRequest(execution_id="e"), metadata=(("x-k", "v"),)) == (
        worker_pb2.ClaimResponse()
    )
    assert servicer.metadata == (("x-k", "v"),)
    for execution_id, code in [
        ("missing", grpc.StatusCode.NOT_FOUND),
        ("slow", grpc.StatusCode.DEADLINE_EXCEEDED),
        ("broken", grpc.StatusCode.UNKNOWN),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Claim(worker_pb2.ClaimRequest(execution_id=execution_id), timeout=0.2)
        assert info.value.code() == code


async def test_cancelling_a_stream_runs_the_servicers_cleanup(setup) -> None:
    servicer, stub = setup
    call = stub.Connect(worker_pb2.ConnectRequest(name="w"))
    first = await asyncio.wait_for(call.read(), 5)
    assert first.connected.worker_name == "w"
    pending = asyncio.ensure_future(call.read())
    await asyncio.sleep(0)
    call.cancel()
    await asyncio.wait_for(servicer.stream_closed.wait(), 1)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(pending, 1)


async def test_a_stream_abort_reaches_the_reader_and_every_later_read(setup) -> None:
    _, stub = setup
    call = stub.Connect(worker_pb2.ConnectRequest(name="w", session_token="refuse"))
    assert (await asyncio.wait_for(call.read(), 5)).WhichOneof("event") == "connected"
    for _ in range(2):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(call.read(), 5)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


class RequireKey(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, details):  # type: ignore[no-untyped-def]
        if ("x-key", "v") in tuple(details.invocation_metadata or ()):
            return await continuation(details)

        async def refuse(request, context):  # type: ignore[no-untyped-def]
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "no key")

        return grpc.unary_unary_rpc_method_handler(refuse)


async def test_the_servers_interceptors_apply_to_in_process_calls() -> None:
    registry = LocalRegistry(interceptors=[RequireKey()])
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(Servicer(), registry)  # type: ignore[arg-type]
    stub = worker_pb2_grpc.WorkerServiceStub(registry.channel())
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Claim(worker_pb2.ClaimRequest(execution_id="e"))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert await stub.Claim(
        worker_pb2.ClaimRequest(execution_id="e"), metadata=(("x-k", "v"), ("x-key", "v"))
    )
