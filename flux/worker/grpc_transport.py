"""The worker's gRPC transport: ``WorkerService`` over one channel per server address."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from flux.domain.execution import ExecutionError, WorkflowRef
from flux.domain.gang import GangInfo, GangMember
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.errors import InvalidArgument, Unavailable, Unimplemented, from_code_name, from_rpc_error
from flux.observe import tracing
from flux.security import TLS_HINT, Credentials, speaks_tls
from flux.v1 import gang_pb2, worker_pb2, worker_pb2_grpc
from flux.worker.call_stream import CallStream
from flux.worker.transport import (
    Answers,
    Cancel,
    Connected,
    Dispatch,
    Heartbeat,
    Outcome,
    Registration,
    WorkerEvent,
    WorkerTransport,
    answers_from,
)

T = TypeVar("T")

log = logging.getLogger("flux.worker")

CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]
UNARY_TIMEOUT = 30.0


def _mapped(call: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    @functools.wraps(call)
    async def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return await call(*args, **kwargs)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # we are being cancelled
            # The call was cancelled under us: its channel closed when the worker moved to
            # another server. Retryable, like any unreachable server, not a reason to give up.
            raise Unavailable("the call was cut off: its connection to the server closed") from None

    return wrapper


def dispatch_from_proto(message: worker_pb2.ExecutionScheduled) -> Dispatch:
    return Dispatch(
        execution_id=message.execution_id,
        attempt=message.attempt,
        generation=message.generation,
        input_json=message.input_json,
        workflow=WorkflowRef.from_proto(message.workflow),
        gpu_indices=tuple(message.gpu_indices),
        requests=ResourceRequest.from_proto(message.requests),
        trace=tracing.carrier(message.trace.traceparent, message.trace.tracestate)
        if message.HasField("trace")
        else "",
        timeout=message.timeout_s,
        heartbeat_interval=message.heartbeat_interval_s,
        last_heartbeat_json=message.last_heartbeat_json,
        gang=gang_from_proto(message.gang_rank, message.gang_members) if message.gang_members else None,
        queued=message.queued,
        priority=message.priority,
        upstream=tuple(message.upstream.items()),
    )


def gang_from_proto(rank: int, members: Sequence[gang_pb2.GangMember]) -> GangInfo:
    return GangInfo(rank, len(members), tuple(GangMember(m.rank, m.worker, m.address) for m in members))


def connected_from_proto(message: worker_pb2.Connected) -> Connected:
    held = dict.fromkeys(message.held_execution_ids, 0)
    held.update((h.execution_id, h.generation) for h in message.held)
    return Connected(message.server_id, held, message.claims_with_results)


def complete_request(
    generation: int, output_json: str | None, error: ExecutionError | None, resources: WorkerResources | None
) -> worker_pb2.CompleteRequest:
    """The result of one execution as the wire carries it; both transports send this message."""
    request = worker_pb2.CompleteRequest(generation=generation)
    if error is not None:
        request.error.CopyFrom(error.to_proto())
    else:
        request.output_json = output_json or "null"
    if resources is not None:
        request.resources.CopyFrom(resources.to_proto())
    return request


def complete_batch_request(
    items: Sequence[Outcome], resources: WorkerResources | None
) -> worker_pb2.CompleteBatchRequest:
    """Results as a CompleteBatch carries them; both transports send this message."""
    request = worker_pb2.CompleteBatchRequest()
    for outcome in items:
        item = request.items.add(
            execution_id=outcome.execution_id, generation=outcome.generation, claim=outcome.claim
        )
        if outcome.error is not None:
            item.error.CopyFrom(outcome.error.to_proto())
        else:
            item.output_json = outcome.output_json or "null"
    if resources is not None:
        request.resources.CopyFrom(resources.to_proto())
    return request


def batch_answers(
    count: int, response: worker_pb2.ClaimBatchResponse | worker_pb2.CompleteBatchResponse
) -> Answers:
    return answers_from(count, [(a.ok, a.code, a.message) for a in response.answers])


class GrpcTransport(WorkerTransport):
    name = "grpc"

    def __init__(self, addresses: Sequence[str], credentials: Credentials | None = None):
        if not addresses:
            raise InvalidArgument("--server needs at least one HOST:PORT")
        self.credentials = credentials or Credentials()
        self._md = self.credentials.metadata
        self._addresses = list(addresses)
        self._index = 0
        self._channel: grpc.aio.Channel | None = None
        self._stub: worker_pb2_grpc.WorkerServiceStub | None = None
        self._tls_seen: dict[str, bool] = {}  # address -> answers a TLS handshake
        # Claims and completions travel on one WorkerCalls stream per channel, unless the
        # server has none (False: the unary ClaimBatch and CompleteBatch, then single calls).
        self._calls: CallStream | None = None
        self._streamed: bool | None = None

    @property
    def address(self) -> str:
        return self._addresses[self._index]

    def rotate(self) -> None:
        """Move to the next server address (after a failed connection)."""
        if len(self._addresses) > 1:
            self._index = (self._index + 1) % len(self._addresses)
            self._drop_channel()

    def _drop_channel(self) -> None:
        self._close_calls()
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            # Closing is async; let it finish in the background.
            asyncio.get_running_loop().create_task(channel.close())

    @property
    def stub(self) -> worker_pb2_grpc.WorkerServiceStub:
        if self._stub is None:
            self._channel = self.credentials.aio_channel(self.address, options=CHANNEL_OPTIONS)
            self._stub = worker_pb2_grpc.WorkerServiceStub(self._channel)
        return self._stub

    async def register(self, registration: Registration) -> str:
        try:
            return await self._register(registration)
        except Unavailable as exc:
            # A plaintext channel to a TLS server only ever says "unavailable": check the
            # protocol once per address, so the retry loop's warning says what to do.
            if self.credentials.ca is None:
                if self.address not in self._tls_seen:
                    self._tls_seen[self.address] = await asyncio.to_thread(speaks_tls, self.address)
                if self._tls_seen[self.address]:
                    raise Unavailable(f"{exc}; {TLS_HINT}") from exc
            raise

    @_mapped
    async def _register(self, registration: Registration) -> str:
        response = await self.stub.Register(
            worker_pb2.RegisterRequest(
                name=registration.name,
                resources=registration.resources.to_proto(),
                software=registration.software.to_proto(),
                labels=registration.labels,
                capacity=registration.capacity,
                prefetch=registration.prefetch,
                session_token=registration.session_token,
                advertise_address=registration.advertise_address,
            ),
            timeout=UNARY_TIMEOUT,
            metadata=self._md,
        )
        return response.session_token

    async def connect(self, name: str, session_token: str) -> AsyncIterator[WorkerEvent]:
        call = self.stub.Connect(
            worker_pb2.ConnectRequest(name=name, session_token=session_token, batched_dispatch=True),
            metadata=self._md,
        )
        try:
            async for event in call:
                kind = event.WhichOneof("event")
                if kind == "execution_scheduled":
                    yield dispatch_from_proto(event.execution_scheduled)
                elif kind == "executions_scheduled":
                    for scheduled in event.executions_scheduled.executions:
                        yield dispatch_from_proto(scheduled)
                elif kind == "execution_cancelled":
                    c = event.execution_cancelled
                    yield Cancel(c.execution_id, c.generation, c.reason, c.preempted)
                elif kind == "connected":
                    yield connected_from_proto(event.connected)
                elif kind == "ping":
                    yield Heartbeat()
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from exc
        finally:
            call.cancel()

    @_mapped
    async def report(
        self,
        name: str,
        token: str,
        resources: WorkerResources,
        software: WorkerSoftware | None,
        draining: bool,
    ) -> None:
        await self.stub.ReportResources(
            worker_pb2.ReportResourcesRequest(
                name=name,
                session_token=token,
                resources=resources.to_proto(),
                software=software.to_proto() if software is not None else None,
                draining=draining,
            ),
            timeout=UNARY_TIMEOUT,
            metadata=self._md,
        )

    @_mapped
    async def claim(self, name: str, token: str, execution_id: str, generation: int) -> None:
        await self.stub.Claim(
            worker_pb2.ClaimRequest(
                name=name, session_token=token, execution_id=execution_id, generation=generation
            ),
            timeout=UNARY_TIMEOUT,
            metadata=self._md,
        )

    @_mapped
    async def complete(
        self,
        name: str,
        token: str,
        execution_id: str,
        generation: int,
        output_json: str | None,
        error: ExecutionError | None,
        resources: WorkerResources | None,
    ) -> None:
        request = complete_request(generation, output_json, error, resources)
        request.name, request.session_token, request.execution_id = name, token, execution_id
        await self.stub.Complete(request, timeout=UNARY_TIMEOUT, metadata=self._md)

    @_mapped
    async def claim_batch(
        self,
        name: str,
        token: str,
        items: Sequence[tuple[str, int]],
        on_written: Callable[[], None] | None = None,
    ) -> Answers:
        request = worker_pb2.ClaimBatchRequest(
            name=name,
            session_token=token,
            items=[worker_pb2.ClaimItem(execution_id=i, generation=g) for i, g in items],
        )
        # On the stream only: the server reads its messages in order. Unary calls race each other.
        answer = await self._on_stream(worker_pb2.WorkerCallsRequest(claims=request), on_written)
        if answer is not None:
            return batch_answers(len(items), answer.claims)
        response = await self.stub.ClaimBatch(request, timeout=UNARY_TIMEOUT, metadata=self._md)
        return batch_answers(len(items), response)

    @_mapped
    async def complete_batch(
        self, name: str, token: str, items: Sequence[Outcome], resources: WorkerResources | None
    ) -> Answers:
        request = complete_batch_request(items, resources)
        request.name, request.session_token = name, token
        answer = await self._on_stream(worker_pb2.WorkerCallsRequest(completions=request))
        if answer is not None:
            return batch_answers(len(items), answer.completions)
        response = await self.stub.CompleteBatch(request, timeout=UNARY_TIMEOUT, metadata=self._md)
        return batch_answers(len(items), response)

    async def _on_stream(
        self, request: worker_pb2.WorkerCallsRequest, on_written: Callable[[], None] | None = None
    ) -> worker_pb2.WorkerCallsResponse | None:
        """The call's answer over the WorkerCalls stream; None when this server has no such stream."""
        if self._streamed is False:
            return None
        if self._calls is None:
            stub = self.stub
            self._calls = CallStream(lambda: stub.WorkerCalls(metadata=self._md))
        try:
            # Written is read in order only by a server known to serve the stream: to one that
            # answers it UNIMPLEMENTED, a request is written and never read.
            answer = await self._calls.call(request, UNARY_TIMEOUT, on_written if self._streamed else None)
        except Unimplemented as exc:
            log.info("the server has no WorkerCalls stream (%s); using the unary batched calls", exc)
            self._close_calls()
            self._streamed = False
            return None
        self._streamed = True
        if answer.WhichOneof("answer") == "refused":
            raise from_code_name(answer.refused.code, answer.refused.message)
        return answer

    def _close_calls(self) -> None:
        if self._calls is not None:
            self._calls.close()
            self._calls = None
        self._streamed = None  # another server may have it: ask again

    @_mapped
    async def release(self, name: str, token: str, execution_id: str, generation: int, reason: str) -> None:
        await self.stub.Release(
            worker_pb2.ReleaseRequest(
                name=name,
                session_token=token,
                execution_id=execution_id,
                generation=generation,
                reason=reason,
            ),
            timeout=UNARY_TIMEOUT,
            metadata=self._md,
        )

    @_mapped
    async def heartbeat(
        self, name: str, token: str, execution_id: str, generation: int, details_json: str
    ) -> None:
        await self.stub.Heartbeat(
            worker_pb2.HeartbeatRequest(
                name=name,
                session_token=token,
                execution_id=execution_id,
                generation=generation,
                details_json=details_json,
            ),
            timeout=UNARY_TIMEOUT,
            metadata=self._md,
        )

    @_mapped
    async def get_source(self, name: str, token: str, source_hash: str) -> tuple[str, str]:
        response = await self.stub.GetWorkflowSource(
            worker_pb2.GetWorkflowSourceRequest(name=name, session_token=token, source_hash=source_hash),
            timeout=UNARY_TIMEOUT,
            metadata=self._md,
        )
        return response.filename, response.source

    async def close(self) -> None:
        self._close_calls()
        if self._channel is not None:
            await self._channel.close()
            self._channel, self._stub = None, None
