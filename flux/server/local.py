"""An in-process ``grpc.aio`` channel: stubs call servicers of the same process without a socket.

The gateway that ``flux start server`` runs beside the core talks to it through
ordinary ``flux.v1`` stubs. Over a real loopback channel every call would cross
gRPC twice in one event loop (client and server side, each with its own wakeups),
which alone tripled the latency of a claim. This channel keeps the stub API and
the servicers' behaviour (aborts become ``AioRpcError`` with the same code,
metadata reaches ``invocation_metadata``, deadlines expire as DEADLINE_EXCEEDED,
cancelling a stream cancels the servicer) and still serializes every message, so
neither side can see or mutate the other's objects. A gateway started on its own
(``flux start gateway --core``) uses a real channel instead.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, NoReturn

import grpc

log = logging.getLogger("flux.server")

Metadata = Sequence[tuple[str, str]]


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code, self.details = code, details


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def _unexpected(exc: BaseException) -> grpc.aio.AioRpcError:
    # What grpc.aio answers when a handler raises something other than an abort.
    log.error("unexpected error in an in-process call", exc_info=exc)
    return _rpc_error(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")


class _Context:
    """The part of ``grpc.aio.ServicerContext`` the flux servicers use."""

    def __init__(self, metadata: Metadata | None, timeout: float | None):
        self._metadata = tuple(metadata or ())
        # Set by a server-streaming call whose servicer writes (grpc.aio's reader/writer form).
        self.writer: Callable[[Any], Awaitable[None]] | None = None
        # Set by a server-streaming call: done once the servicer sends its headers (or a message).
        self.headers: asyncio.Future[None] | None = None
        self._deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        self.trailing: tuple[tuple[str, str], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def set_trailing_metadata(self, metadata: Metadata) -> None:
        self.trailing = tuple(metadata)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()
    ) -> NoReturn:
        raise _Abort(code, details)

    def time_remaining(self) -> float | None:
        return (
            None if self._deadline is None else max(0.0, self._deadline - asyncio.get_running_loop().time())
        )

    def peer(self) -> str:
        return "local:"

    async def send_initial_metadata(self, metadata: Metadata) -> None:
        if self.headers is not None and not self.headers.done():
            self.headers.set_result(None)

    async def write(self, message: Any) -> None:
        if self.writer is None:
            raise RuntimeError("write() outside a server-streaming call")
        await self.writer(message)


def _decode(deserialize: Callable[[bytes], Any] | None, data: bytes) -> Any:
    # A handler without a deserializer takes the raw bytes, as on a server.
    return data if deserialize is None else deserialize(data)


def _encode(serialize: Callable[[Any], bytes] | None, message: Any) -> bytes:
    return message if serialize is None else serialize(message)


class _CallDetails(grpc.HandlerCallDetails):
    def __init__(self, method: str, metadata: tuple[tuple[str, str], ...]):
        self.method, self.invocation_metadata = method, metadata


class LocalRegistry:
    """Collects method handlers as a ``grpc.aio.Server`` would, for ``add_*Servicer_to_server``.

    ``interceptors`` are the server's own, so an in-process call passes the same
    checks (authentication, input guards) as one that arrives over the network.
    """

    def __init__(self, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}
        self.interceptors = tuple(interceptors)

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        pass  # the generated code also calls add_registered_method_handlers with the same handlers

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        for method, handler in handlers.items():
            self.handlers[f"/{service}/{method}"] = handler

    def channel(self) -> LocalChannel:
        return LocalChannel(self.handlers, self.interceptors)


class LocalUnaryCall:
    """A unary call as ``grpc.aio`` gives one: awaited for its answer, then its trailing metadata."""

    __slots__ = ("_answer", "_context")

    def __init__(self, answer: Coroutine[Any, Any, Any], context: _Context):
        self._answer, self._context = answer, context

    def __await__(self) -> Generator[Any, None, Any]:
        return self._answer.__await__()

    async def trailing_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata(*self._context.trailing)


class LocalChannel:
    """Enough of ``grpc.aio.Channel`` for generated stubs: unary-unary and unary-stream calls.

    Stream-stream methods (WorkerCalls) exist for the stubs' sake and answer UNIMPLEMENTED.
    """

    def __init__(
        self,
        handlers: dict[str, grpc.RpcMethodHandler],
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ):
        self._handlers = handlers
        self._interceptors = tuple(interceptors)

    async def _resolve(self, method: str, metadata: tuple[tuple[str, str], ...]) -> grpc.RpcMethodHandler:
        async def lookup(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
            return self._handlers.get(details.method)

        continuation: Callable[[grpc.HandlerCallDetails], Any] = lookup
        # The first interceptor runs first, as on a grpc.aio server.
        for interceptor in reversed(self._interceptors):
            continuation = functools.partial(interceptor.intercept_service, continuation)
        handler = await continuation(_CallDetails(method, metadata))
        if handler is None:
            raise _rpc_error(grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {method}")
        return handler

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool = False,
    ) -> Callable[..., Any]:
        def call(
            request: Any, *, timeout: float | None = None, metadata: Metadata | None = None, **_: Any
        ) -> LocalUnaryCall:
            context = _Context(metadata, timeout)
            return LocalUnaryCall(answer(request, context, timeout), context)

        async def answer(request: Any, context: _Context, timeout: float | None) -> Any:
            handler = self._handlers.get(method) if not self._interceptors else None
            if handler is None:
                handler = await self._resolve(method, context.invocation_metadata())
            message = _decode(handler.request_deserializer, request_serializer(request))  # type: ignore[misc]
            invocation = handler.unary_unary(message, context)  # type: ignore[misc]
            try:
                response = await (invocation if timeout is None else asyncio.wait_for(invocation, timeout))
            except _Abort as abort:
                raise _rpc_error(abort.code, abort.details) from None
            except TimeoutError:
                raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
            except Exception as exc:
                raise _unexpected(exc) from None
            return response_deserializer(_encode(handler.response_serializer, response))  # type: ignore[misc]

        return call

    def stream_stream(
        self, method: str, request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None, **_: Any,
    ) -> Callable[..., NoReturn]:  # fmt: skip
        """WorkerCalls: for a worker's own stream; nothing in-process opens one."""

        def call(*args: Any, **kwargs: Any) -> NoReturn:
            raise _rpc_error(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not served in-process")

        return call

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool = False,
    ) -> Callable[..., LocalStreamCall]:
        def call(
            request: Any, *, timeout: float | None = None, metadata: Metadata | None = None, **_: Any
        ) -> LocalStreamCall:
            context = _Context(metadata, timeout)
            context.headers = asyncio.get_running_loop().create_future()
            data = request_serializer(request)  # type: ignore[misc]

            async def serve(write: Callable[[bytes], Awaitable[None]]) -> None:
                handler = await self._resolve(method, context.invocation_metadata())
                message = _decode(handler.request_deserializer, data)
                behaviour = handler.unary_stream
                if inspect.isasyncgenfunction(behaviour):
                    async for response in behaviour(message, context):
                        await write(_encode(handler.response_serializer, response))
                else:  # the reader/writer form (Connect): the servicer calls context.write
                    context.writer = lambda response: write(_encode(handler.response_serializer, response))
                    await behaviour(message, context)

            return LocalStreamCall(serve, response_deserializer, timeout, context.headers)

        return call

    async def close(self, grace: float | None = None) -> None:
        pass  # the servicers belong to the server, which stops them

    async def __aenter__(self) -> LocalChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


_CANCELLED = object()


STREAM_WINDOW = 16


class LocalStreamCall:
    """A server stream whose servicer runs in its own task, as on a real server.

    ``cancel()`` cancels that task, so the servicer's ``finally`` runs exactly as
    when a remote client goes away; a ``read()`` after it raises ``CancelledError``,
    as ``grpc.aio`` does.
    """

    def __init__(
        self,
        serve: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]],
        deserialize: Callable[[bytes], Any],
        timeout: float | None,
        headers: asyncio.Future[None] | None = None,
    ):
        self._deserialize = deserialize
        self._headers = headers or asyncio.get_running_loop().create_future()
        self._status: tuple[grpc.StatusCode, str] | None = None
        self._items: asyncio.Queue[object] = asyncio.Queue()
        # Flow control, as HTTP/2 gives a real stream: the servicer runs at most this many
        # messages ahead of the reader, so a reader that stops (a stalled SSE client) backs
        # up into the core's bounded session buffer instead of growing this queue.
        self._window = asyncio.Semaphore(STREAM_WINDOW)
        loop = asyncio.get_running_loop()
        self._deadline = None if timeout is None else loop.time() + timeout
        self._task = loop.create_task(self._pump(serve))

    async def _write(self, response: bytes) -> None:
        if not self._headers.done():  # as on a wire: the first message carries the headers
            self._headers.set_result(None)
        await self._window.acquire()
        self._items.put_nowait(response)

    def _end(self, item: object, code: grpc.StatusCode, details: str = "") -> None:
        self._status = (code, details)
        self._items.put_nowait(item)

    async def _pump(self, serve: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]) -> None:
        try:
            await serve(self._write)
            self._end(grpc.aio.EOF, grpc.StatusCode.OK)
        except _Abort as abort:
            self._end(_rpc_error(abort.code, abort.details), abort.code, abort.details)
        except grpc.aio.AioRpcError as error:  # e.g. UNIMPLEMENTED from the lookup
            self._end(error, error.code(), error.details() or "")
        except asyncio.CancelledError:
            self._end(_CANCELLED, grpc.StatusCode.CANCELLED, "Locally cancelled")
            raise
        except Exception as exc:
            error = _unexpected(exc)
            self._end(error, error.code(), error.details() or "")

    async def initial_metadata(self) -> grpc.aio.Metadata:
        """Once the servicer has sent its headers, or ended without them."""
        await asyncio.wait((self._headers, self._task), return_when=asyncio.FIRST_COMPLETED)
        return grpc.aio.Metadata()

    async def code(self) -> grpc.StatusCode:
        await asyncio.wait((self._task,))
        return self._status[0] if self._status else grpc.StatusCode.CANCELLED

    async def details(self) -> str:
        await asyncio.wait((self._task,))
        return self._status[1] if self._status else ""

    async def read(self) -> Any:
        if self._deadline is None:
            item = await self._items.get()
        else:
            remaining = self._deadline - asyncio.get_running_loop().time()
            try:
                item = await asyncio.wait_for(self._items.get(), max(0.0, remaining))
            except TimeoutError:
                self._task.cancel()
                raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        if isinstance(item, bytes):
            self._window.release()
            return self._deserialize(item)
        # A terminal item stays at the head for any later read.
        self._items.put_nowait(item)
        if item is _CANCELLED:
            raise asyncio.CancelledError()
        if isinstance(item, grpc.aio.AioRpcError):
            raise item
        return item  # EOF

    def cancel(self) -> bool:
        if self._task.done():
            return False
        self._task.cancel()
        # Also when the task never started, so never reaches its own put.
        self._items.put_nowait(_CANCELLED)
        return True

    def done(self) -> bool:
        return self._task.done()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while (item := await self.read()) is not grpc.aio.EOF:
            yield item
