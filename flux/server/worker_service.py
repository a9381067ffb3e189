"""The worker-facing gRPC service: convert, call the dispatcher, convert back.

Errors become status codes through ``flux.errors.STATUS`` only, by way of
``flux.server.answers``: domain errors as they are, the store's "database unreachable"
as UNAVAILABLE, anything else INTERNAL (``flux.errors.refusal``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import grpc

from flux.dispatcher.core import Dispatcher
from flux.domain.execution import ExecutionError
from flux.domain.worker import WorkerSoftware
from flux.errors import InvalidArgument, PermissionDenied
from flux.matching.pools import POOL_LABEL
from flux.server import convert, worker_convert
from flux.server.answers import abort, call_refused, unary
from flux.server.callers import Callers
from flux.server.dispatch_stream import DispatchStream
from flux.server.metadata import TRANSPORT_METADATA
from flux.server.multiplexed import multiplexed
from flux.v1 import worker_pb2, worker_pb2_grpc

# Calls one WorkerCalls stream may have running at once; a worker keeps one per kind in flight.
CALLS_IN_FLIGHT = 16


def _transport(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == TRANSPORT_METADATA and value in ("grpc", "sse"):
            return value
    return "grpc"


def check_pool(pool: str | None, labels: Mapping[str, str]) -> None:
    """A worker token bound to ``pool`` registers workers of that pool only (``--pool``)."""
    if pool is None:
        return
    joined = labels.get(POOL_LABEL, "")
    if joined != pool:
        where = f"pool {joined!r}" if joined else "no pool"
        raise PermissionDenied(
            f"this worker token is bound to pool {pool!r}; a worker with it cannot join {where}: "
            f"start it with --pool {pool}"
        )


class WorkerService(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self, dispatcher: Dispatcher, callers: Callers | None = None):
        self.dispatcher = dispatcher
        self.callers = callers
        # Messages to and from workers (LifecycleCounters.worker_messages_*): what one costs is
        # what a burst costs, so a change that saves some shows in these.
        self._counters = dispatcher.events.counters

    def _counted(self, received: int = 1, sent: int = 1) -> None:
        """A unary call: one message each way (an answer or a refusal)."""
        self._counters.worker_messages_received += received
        self._counters.worker_messages_sent += sent

    @unary()
    async def Register(self, request: worker_pb2.RegisterRequest, context: grpc.aio.ServicerContext):
        self._counted()
        registration = worker_convert.registration_from_proto(
            request, _transport(context), context.peer() or ""
        )
        if self.callers is not None:
            # Every registration, a session's re-registration too: its labels may change there.
            check_pool(await self.callers.worker_pool(context), registration.labels)
        token = await self.dispatcher.register_worker(registration)
        return worker_pb2.RegisterResponse(session_token=token, server_id=self.dispatcher.settings.server_id)

    async def Connect(self, request: worker_pb2.ConnectRequest, context: grpc.aio.ServicerContext) -> None:
        # A coroutine, not a generator: grpc.aio's reader/writer form, so an idle stream waits on
        # one future instead of a generator step rebuilt after every event (server/dispatch_stream.py).
        self._counted(sent=0)  # its events count as they are written (DispatchStream)
        try:
            session = self.dispatcher.connect(request.name, request.session_token, _transport(context))
        except Exception as exc:
            await abort(self.dispatcher, context, exc)
            return
        failed: Exception | None = None
        try:
            settings = self.dispatcher.settings
            await context.write(
                worker_pb2.WorkerEvent(
                    connected=worker_pb2.Connected(
                        worker_name=request.name,
                        server_id=settings.server_id,
                        ping_interval_ms=int(settings.ping_interval * 1000),
                        held_execution_ids=list(session.held),
                        held=[
                            worker_pb2.HeldExecution(execution_id=i, generation=g)
                            for i, g in session.held.items()
                        ],
                        claims_with_results=True,
                    )
                )
            )
            self._counted(received=0)
            await DispatchStream(
                self.dispatcher, session, context, request.batched_dispatch, self._counters
            ).run()
        except Exception as exc:  # e.g. the store unavailable while an input is read
            failed = exc
        finally:
            # Runs on client cancel, server shutdown, or takeover: the core learns the stream is gone.
            self.dispatcher.disconnect(session)
        if failed is not None:
            await abort(self.dispatcher, context, failed)

    @unary()
    async def ReportResources(
        self, request: worker_pb2.ReportResourcesRequest, context: grpc.aio.ServicerContext
    ):
        self._counted()
        software = WorkerSoftware.from_proto(request.software) if request.HasField("software") else None
        self.dispatcher.report(
            request.name,
            request.session_token,
            convert.resources_from_proto(request.resources),
            software,
            request.draining,
        )
        return worker_pb2.ReportResourcesResponse()

    @unary()
    async def Claim(self, request: worker_pb2.ClaimRequest, context: grpc.aio.ServicerContext):
        self._counted()
        self.dispatcher.claim(request.name, request.session_token, request.execution_id, request.generation)
        return worker_pb2.ClaimResponse()

    @unary()
    async def Complete(self, request: worker_pb2.CompleteRequest, context: grpc.aio.ServicerContext):
        self._counted()
        result = request.WhichOneof("result")
        if result is None:
            raise InvalidArgument("result is missing; set output_json or error")
        resources = convert.resources_from_proto(request.resources) if request.HasField("resources") else None
        await self.dispatcher.complete(
            request.name,
            request.session_token,
            request.execution_id,
            request.generation,
            request.output_json if result == "output_json" else None,
            ExecutionError.from_proto(request.error) if result == "error" else None,
            resources,
        )
        return worker_pb2.CompleteResponse()

    @unary()
    async def Release(self, request: worker_pb2.ReleaseRequest, context: grpc.aio.ServicerContext):
        self._counted()
        self.dispatcher.release(
            request.name, request.session_token, request.execution_id, request.generation, request.reason
        )
        return worker_pb2.ReleaseResponse()

    @unary()
    async def Heartbeat(self, request: worker_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext):
        self._counted()
        await self.dispatcher.heartbeat(
            request.name,
            request.session_token,
            request.execution_id,
            request.generation,
            request.details_json,
        )
        return worker_pb2.HeartbeatResponse()

    @unary()
    async def ClaimBatch(self, request: worker_pb2.ClaimBatchRequest, context: grpc.aio.ServicerContext):
        self._counted()
        return self._claims(request)

    @unary()
    async def CompleteBatch(
        self, request: worker_pb2.CompleteBatchRequest, context: grpc.aio.ServicerContext
    ):
        self._counted()
        return await self._completions(request)

    def _claims(self, request: worker_pb2.ClaimBatchRequest) -> worker_pb2.ClaimBatchResponse:
        items = [(item.execution_id, item.generation) for item in request.items]
        answers = self.dispatcher.claim_batch(request.name, request.session_token, items)
        return worker_pb2.ClaimBatchResponse(answers=worker_convert.item_answers(items, answers))

    async def _completions(
        self, request: worker_pb2.CompleteBatchRequest
    ) -> worker_pb2.CompleteBatchResponse:
        items = [
            worker_convert.result_from_proto(item, f"items[{i}]") for i, item in enumerate(request.items)
        ]
        resources = convert.resources_from_proto(request.resources) if request.HasField("resources") else None
        answers = await self.dispatcher.complete_batch(request.name, request.session_token, items, resources)
        return worker_pb2.CompleteBatchResponse(
            answers=worker_convert.item_answers([(i.execution_id, i.generation) for i in items], answers)
        )

    async def WorkerCalls(
        self, requests: AsyncIterator[worker_pb2.WorkerCallsRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[worker_pb2.WorkerCallsResponse]:
        """Claims and completions as stream messages, each answered under its call_id when done.

        A claim touches only memory and is answered as it is read. A completion waits for its
        commit, so each runs in a task of its own and a claim never waits behind one; at most
        ``CALLS_IN_FLIGHT`` run at once per stream (reading waits for a free slot). The stream
        ends once the worker has stopped writing and every call is answered.
        """
        Answer = worker_pb2.WorkerCallsResponse

        def refused(call: worker_pb2.WorkerCallsRequest, exc: Exception) -> worker_pb2.WorkerCallsResponse:
            return Answer(call_id=call.call_id, refused=call_refused(self.dispatcher, exc))

        async def complete(call: worker_pb2.WorkerCallsRequest, answer: Callable[[Answer], None]) -> None:
            try:
                answer(Answer(call_id=call.call_id, completions=await self._completions(call.completions)))
            except Exception as exc:
                answer(refused(call, exc))

        def handle(
            call: worker_pb2.WorkerCallsRequest, answer: Callable[[Answer], None]
        ) -> Awaitable[None] | None:
            self._counters.worker_messages_received += 1
            kind = call.WhichOneof("call")
            if kind == "completions":
                return complete(call, answer)
            if kind == "claims":
                try:
                    answer(Answer(call_id=call.call_id, claims=self._claims(call.claims)))
                except Exception as exc:
                    answer(refused(call, exc))
            else:
                answer(refused(call, InvalidArgument("call is empty: set claims or completions")))
            return None

        async for reply in multiplexed(requests, handle, CALLS_IN_FLIGHT):
            self._counters.worker_messages_sent += 1
            yield reply

    @unary()
    async def GetWorkflowSource(
        self, request: worker_pb2.GetWorkflowSourceRequest, context: grpc.aio.ServicerContext
    ):
        self._counted()
        self.dispatcher.authorize(request.name, request.session_token)
        filename, source = await self.dispatcher.get_source(request.source_hash)
        return worker_pb2.WorkflowSource(source_hash=request.source_hash, filename=filename, source=source)
