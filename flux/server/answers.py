"""How every gRPC service of the server answers an error: through the one table in ``flux.errors``.

Never grpc's UNKNOWN, never a bare driver exception: a handler's error becomes the domain
error it stands for (``logged_refusal``) and the call is aborted with that error's status.
The handlers themselves never abort, so nothing caught here is an abort.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from flux.errors import FluxError, InvalidArgument, logged_refusal, status_of
from flux.v1 import worker_pb2

log = logging.getLogger("flux.server")
R = TypeVar("R")


class _HasDispatcher:
    dispatcher: Any  # flux.dispatcher.core.Dispatcher; Any keeps this module free of the core


def refusal_for(dispatcher: Any, exc: Exception, what: str = "a request") -> FluxError:
    """The error ``exc`` is answered with, logged as it deserves."""
    return logged_refusal(exc, dispatcher.store.unavailable, log, what)


async def abort(
    dispatcher: Any, context: grpc.aio.ServicerContext, exc: Exception, what: str = "a request"
) -> None:
    error = refusal_for(dispatcher, exc, what)
    await context.abort(status_of(error)[0], str(error))


def unary(
    what: str = "a request", invalid: tuple[type[Exception], ...] = ()
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """A unary handler of a service holding ``self.dispatcher``, answering errors through the table.

    ``invalid``: exception types the handler's own checks raise for a bad field (a ``ValueError``
    naming the field and the accepted form), answered INVALID_ARGUMENT with that message.
    """

    def decorate(handler: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        @functools.wraps(handler)
        async def wrapper(self: _HasDispatcher, request: Any, context: grpc.aio.ServicerContext) -> R:
            try:
                return await handler(self, request, context)
            except invalid as exc:
                error = exc if isinstance(exc, InvalidArgument) else InvalidArgument(str(exc))
                await context.abort(status_of(error)[0], str(error))
                raise  # unreachable: abort raises
            except Exception as exc:
                await abort(self.dispatcher, context, exc, what)
                raise  # unreachable: abort raises

        return wrapper

    return decorate


def call_refused(dispatcher: Any, exc: Exception, what: str = "a request") -> worker_pb2.CallRefused:
    """One call among many on a stream refused, with the status it would end with alone."""
    error = refusal_for(dispatcher, exc, what)
    return worker_pb2.CallRefused(code=status_of(error)[0].name, message=str(error))
