"""Server interceptors that run before any servicer: malformed bytes become INVALID_ARGUMENT.

grpc answers a request it cannot deserialize with UNKNOWN; callers should
learn that *their input* was wrong, so decoding is done here and failures
are refused with INVALID_ARGUMENT naming the message type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc


class _Malformed:
    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


class DecodeGuard(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        decode = handler.request_deserializer
        method = details.method

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

        stream = handler.unary_stream

        async def guarded_stream(request: object, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
            if isinstance(request, _Malformed):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal(request))
            async for response in stream(request, context):
                yield response

        return grpc.unary_stream_rpc_method_handler(guarded_stream, lenient, handler.response_serializer)
