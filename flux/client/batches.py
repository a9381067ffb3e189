"""Batches from the clients: what ``map`` returns, and ``client.batches`` (BatchService).

``client.map(name, inputs, max_concurrent=4)`` returns what it returned before, a list of the
executions in input order (code that iterates or indexes it still works), as ``Executions``: the
same list, with the batch it made as ``.batch_id`` and ``.batch`` (a handle: ``show()``,
``wait()``, ``cancel()``; coroutines on the asyncio client). Inputs beyond one call's cap go in
several RunWorkflows calls: the first makes the batch, the rest join it by id.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

import grpc

from flux.domain.batch import check_batch_id, check_max_concurrent
from flux.errors import FluxError, Unavailable
from flux.v1 import batches_pb2, batches_pb2_grpc, control_pb2

__all__ = [
    "AsyncBatchCalls", "AsyncBatchHandle", "BatchCalls", "BatchHandle", "BatchWaitTimedOut", "Executions",
    "async_batch_calls", "batch_calls", "batch_fields",
]  # fmt: skip


class BatchWaitTimedOut(FluxError, TimeoutError):
    """A batch wait gave up at its timeout: some member is not finished. ``batch``: its progress
    when last seen (None if none arrived)."""

    def __init__(self, batch_id: str, timeout: float, batch: batches_pb2.Batch | None):
        self.batch_id, self.timeout, self.batch = batch_id, timeout, batch
        where = "" if batch is None else (
            f": {batch.completed + batch.failed + batch.cancelled}/{batch.total} finished, "
            f"{batch.running} running, {batch.created} waiting"
        )  # fmt: skip
        super().__init__(f"timed out after {timeout:g}s; batch {batch_id} is not finished{where}")


def batch_fields(
    request: control_pb2.RunWorkflowsRequest, batch: bool, max_concurrent: int | None, batch_id: str
) -> control_pb2.RunWorkflowsRequest:
    """Set a RunWorkflows request's batch fields: join ``batch_id`` when there is one (a later
    call of the same map), else make a batch as asked. ``max_concurrent`` is checked here too, so
    a bad value is refused before anything is sent."""
    if max_concurrent is not None:
        check_max_concurrent(max_concurrent, "max_concurrent")
    if batch_id:
        request.batch_id = batch_id
    else:
        request.batch = batch
        if max_concurrent is not None:
            request.max_concurrent = max_concurrent
    return request


class Executions(list):  # type: ignore[type-arg]
    """``map``'s executions in input order (a plain list otherwise), and the batch they make."""

    def __init__(
        self, executions: Iterable[control_pb2.Execution], batch: BatchHandle | AsyncBatchHandle | None
    ):
        super().__init__(executions)
        self.batch = batch

    @property
    def batch_id(self) -> str:
        return self.batch.id if self.batch is not None else ""


class BatchHandle:
    """One batch: its progress, a wait for its end, its cancel (blocking)."""

    def __init__(self, batch_id: str, calls: BatchCalls):
        self.id = batch_id
        self._calls = calls

    def show(self) -> batches_pb2.Batch:
        return self._calls.get(self.id)

    def wait(self, timeout: float | None = None) -> batches_pb2.Batch:
        return self._calls.wait(self.id, timeout)

    def cancel(self) -> batches_pb2.Batch:
        return self._calls.cancel(self.id)

    def __repr__(self) -> str:
        return f"BatchHandle({self.id!r})"


class BatchCalls:
    """``client.batches``: read, follow and cancel batches by id (``flux batch show|wait|cancel``)."""

    def __init__(
        self,
        call: Callable[[str, Any], Any],
        stream: Callable[[str, Any, float | None], Iterator[Any]],
    ):
        self._call = call
        self._stream = stream

    def handle(self, batch_id: str) -> BatchHandle:
        return BatchHandle(_checked(batch_id), self)

    def get(self, batch_id: str) -> batches_pb2.Batch:
        answer = self._call("GetBatch", batches_pb2.GetBatchRequest(batch_id=_checked(batch_id)))
        return answer.batch

    def watch(self, batch_id: str, timeout: float | None = None) -> Iterator[batches_pb2.Batch]:
        """Its progress now, then each change; ends after the step where every member is finished."""
        request = batches_pb2.WatchBatchRequest(batch_id=_checked(batch_id))
        for step in self._stream("WatchBatch", request, timeout):
            yield step.batch

    def wait(
        self,
        batch_id: str,
        timeout: float | None = None,
        on_update: Callable[[batches_pb2.Batch], None] | None = None,
    ) -> batches_pb2.Batch:
        """The batch once every member is finished; ``BatchWaitTimedOut`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        try:
            for last in self.watch(batch_id, timeout):
                if on_update is not None:
                    on_update(last)
        except Unavailable:
            if deadline is None or time.monotonic() < deadline:
                raise
        if last is None or not last.finished:
            raise BatchWaitTimedOut(batch_id, timeout or 0.0, last)
        return last

    def cancel(self, batch_id: str) -> batches_pb2.Batch:
        return self._call("CancelBatch", batches_pb2.CancelBatchRequest(batch_id=_checked(batch_id))).batch


class AsyncBatchHandle:
    """One batch on the asyncio client: ``await handle.show()``, ``.wait()``, ``.cancel()``."""

    def __init__(self, batch_id: str, calls: AsyncBatchCalls):
        self.id = batch_id
        self._calls = calls

    def show(self) -> Awaitable[batches_pb2.Batch]:
        return self._calls.get(self.id)

    def wait(self, timeout: float | None = None) -> Awaitable[batches_pb2.Batch]:
        return self._calls.wait(self.id, timeout)

    def cancel(self) -> Awaitable[batches_pb2.Batch]:
        return self._calls.cancel(self.id)

    def __repr__(self) -> str:
        return f"AsyncBatchHandle({self.id!r})"


class AsyncBatchCalls:
    """``client.batches`` on the asyncio client."""

    def __init__(
        self,
        call: Callable[[str, Any], Awaitable[Any]],
        stream: Callable[[str, Any, float | None], AsyncIterator[Any]],
    ):
        self._call = call
        self._stream = stream

    def handle(self, batch_id: str) -> AsyncBatchHandle:
        return AsyncBatchHandle(_checked(batch_id), self)

    async def get(self, batch_id: str) -> batches_pb2.Batch:
        answer = await self._call("GetBatch", batches_pb2.GetBatchRequest(batch_id=_checked(batch_id)))
        return answer.batch

    async def watch(self, batch_id: str, timeout: float | None = None) -> AsyncIterator[batches_pb2.Batch]:
        request = batches_pb2.WatchBatchRequest(batch_id=_checked(batch_id))
        async for step in self._stream("WatchBatch", request, timeout):
            yield step.batch

    async def wait(self, batch_id: str, timeout: float | None = None) -> batches_pb2.Batch:
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        try:
            async for last in self.watch(batch_id, timeout):  # noqa: B007 - the last one is the answer
                pass
        except Unavailable:
            if deadline is None or time.monotonic() < deadline:
                raise
        if last is None or not last.finished:
            raise BatchWaitTimedOut(batch_id, timeout or 0.0, last)
        return last

    async def cancel(self, batch_id: str) -> batches_pb2.Batch:
        request = batches_pb2.CancelBatchRequest(batch_id=_checked(batch_id))
        return (await self._call("CancelBatch", request)).batch


def _checked(batch_id: str) -> str:
    return check_batch_id(batch_id)


def batch_calls(
    channel: grpc.Channel, metadata: Any, timeout: float, error: Callable[[grpc.RpcError], FluxError]
) -> BatchCalls:
    """``BatchCalls`` over a blocking client's channel; ``error`` turns a failed call into a FluxError."""
    stub = batches_pb2_grpc.BatchServiceStub(channel)

    def call(method: str, request: Any) -> Any:
        try:
            return getattr(stub, method)(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as exc:
            raise error(exc) from None

    def stream(method: str, request: Any, wait: float | None) -> Iterator[Any]:
        reply = getattr(stub, method)(request, timeout=wait, metadata=metadata)
        try:
            yield from reply
        except grpc.RpcError as exc:
            raise error(exc) from None
        finally:
            reply.cancel()

    return BatchCalls(call, stream)


def async_batch_calls(
    channel: grpc.aio.Channel,
    metadata: Any,
    timeout: float,
    error: Callable[[grpc.RpcError], Awaitable[FluxError]],
) -> AsyncBatchCalls:
    """``AsyncBatchCalls`` over the asyncio client's channel."""
    stub = batches_pb2_grpc.BatchServiceStub(channel)

    async def call(method: str, request: Any) -> Any:
        try:
            return await getattr(stub, method)(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as exc:
            raise await error(exc) from None

    async def stream(method: str, request: Any, wait: float | None) -> AsyncIterator[Any]:
        reply = getattr(stub, method)(request, timeout=wait, metadata=metadata)
        try:
            async for step in reply:
                yield step
        except grpc.RpcError as exc:
            raise await error(exc) from None
        finally:
            reply.cancel()

    return AsyncBatchCalls(call, stream)
