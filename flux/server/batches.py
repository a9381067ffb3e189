"""``BatchService``: a batch's progress, followed until it ends, and its cancel (``flux batch …``).

Any role reads its own tenant's batches; a submit token (or better) cancels them
(flux.server.callers); a cluster admin sees every tenant's. Another tenant's batch is answered as
one that does not exist, as an execution is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.state.tenants import OPERATOR, Caller
from flux.domain.batch import BatchProgress
from flux.server.answers import abort, unary
from flux.server.callers import Callers
from flux.v1 import batches_pb2, batches_pb2_grpc


def batch_to_proto(p: BatchProgress) -> batches_pb2.Batch:
    b = p.batch
    return batches_pb2.Batch(
        batch_id=b.batch_id, workflow_name=b.workflow_name, tenant=b.tenant, max_concurrent=b.max_concurrent,
        total=p.total, created=p.created, running=p.running, completed=p.completed, failed=p.failed,
        cancelled=p.cancelled, created_at_ms=int(b.created_at * 1000),
        cancelled_at_ms=int(b.cancelled_at * 1000), finished=p.finished,
    )  # fmt: skip


class BatchService(batches_pb2_grpc.BatchServiceServicer):
    def __init__(self, dispatcher: Dispatcher, callers: Callers | None = None):
        self.dispatcher = dispatcher
        self.callers = callers

    async def _tenant(self, context: grpc.aio.ServicerContext) -> str | None:
        """Whose batches the caller sees: its tenant's, or every tenant's (None) for a cluster admin."""
        caller: Caller = OPERATOR if self.callers is None else await self.callers.of(context)
        return None if caller.cluster_admin else caller.tenant

    @unary("a batch request")
    async def GetBatch(self, request: batches_pb2.GetBatchRequest, context: grpc.aio.ServicerContext):
        progress = await self.dispatcher.get_batch(request.batch_id, await self._tenant(context))
        return batches_pb2.GetBatchResponse(batch=batch_to_proto(progress))

    async def WatchBatch(
        self, request: batches_pb2.WatchBatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[batches_pb2.WatchBatchResponse]:
        steps = None
        try:
            steps = self.dispatcher.watch_batch(request.batch_id, await self._tenant(context))
            async for progress in steps:
                yield batches_pb2.WatchBatchResponse(batch=batch_to_proto(progress))
        except Exception as exc:
            await abort(self.dispatcher, context, exc, "a batch request")
        finally:
            if steps is not None:
                await steps.aclose()

    @unary("a batch request")
    async def CancelBatch(self, request: batches_pb2.CancelBatchRequest, context: grpc.aio.ServicerContext):
        progress = await self.dispatcher.cancel_batch(request.batch_id, await self._tenant(context))
        return batches_pb2.CancelBatchResponse(batch=batch_to_proto(progress))
