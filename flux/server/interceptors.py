"""Server interceptors that run before any servicer: malformed bytes become INVALID_ARGUMENT.

grpc answers a request it cannot deserialize with UNKNOWN; callers should
learn that *their input* was wrong, so decoding is done here and failures
are refused with INVALID_ARGUMENT naming the message type.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc


class _Malformed:
    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


class DecodeGuard(grpc.aio.ServerInterceptor):
    def __init__(self) -> None:
        # The guarded handler of each method, built once: handlers are fixed at start-up.
        self._guarded: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        if handler.request_streaming and not handler.response_streaming:
            return handler  # stream in, one answer out: flux serves no such method
        cached = self._guarded.get(details.method)
        if cached is None or cached[0] is not handler:
            cached = self._guarded[details.method] = (handler, _guard(handler, details.method))
        return cached[1]


def _guard(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """``handler`` with a decoder that never raises and a check that refuses what it could not decode."""
    decode = handler.request_deserializer

    def lenient(data: bytes) -> object:
        try:
            return decode(data)
        except Exception as exc:  # DecodeError, and anything a corrupt payload provokes
            return _Malformed(f"{type(exc).__name__}: {exc}")

    def refusal(request: _Malformed) -> str:
        return f"the request to {method} is not a valid protobuf message ({request.reason})"

    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def guarded_unary(request: object, context: grpc.aio.ServicerContext) -> object:
            if isinstance(request, _Malformed):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal(request))
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(guarded_unary, lenient, handler.response_serializer)

    if handler.stream_stream is not None:
        streaming = handler.stream_stream

        async def checked(requests: AsyncIterator[object], context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
            async for request in requests:
                if isinstance(request, _Malformed):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal(request))
                yield request

        # An async generator function, as grpc.aio requires of a handler it should not run on a thread.
        async def guarded_stream_stream(requests: AsyncIterator[object], context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
            async for response in streaming(checked(requests, context), context):
                yield response

        return grpc.stream_stream_rpc_method_handler(
            guarded_stream_stream, lenient, handler.response_serializer
        )

    stream = handler.unary_stream

    if not inspect.isasyncgenfunction(stream):
        # A handler that writes with context.write (Connect): wrapped as a coroutine, since grpc.aio
        # picks the reader/writer form or the generator form by what the handler is.
        async def guarded_writer(request: object, context: grpc.aio.ServicerContext) -> None:
            if isinstance(request, _Malformed):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal(request))
            await stream(request, context)

        return grpc.unary_stream_rpc_method_handler(guarded_writer, lenient, handler.response_serializer)

    async def guarded_stream(request: object, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        if isinstance(request, _Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal(request))
        async for response in stream(request, context):
            yield response

    return grpc.unary_stream_rpc_method_handler(guarded_stream, lenient, handler.response_serializer)
