"""Domain errors and the one table that maps them onto gRPC codes and HTTP statuses.

Core code raises these; the gRPC servicers and the gateway translate them
through ``STATUS`` and nothing else, so a refusal means the same on every
transport.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # grpc loads only where a status code is built: domain code imports this module
    import grpc


class FluxError(Exception):
    """Base of every error the control plane reports to a caller."""


class InvalidArgument(FluxError, ValueError):
    """The request is malformed: names the field and the accepted form."""


class NotFound(FluxError, LookupError):
    """No such workflow, execution or worker."""


class AlreadyExists(FluxError):
    """The name is held, e.g. by a live worker stream."""


class FailedPrecondition(FluxError):
    """The request is well-formed but the state forbids it (stale generation, wrong worker)."""


class Unauthenticated(FluxError):
    """No credentials, or credentials that are not valid."""


class PermissionDenied(FluxError):
    """Valid credentials that may not do this."""


class ResourceExhausted(FluxError):
    """A size or rate limit was hit; the message names the limit."""


class Unavailable(FluxError):
    """The server is shutting down or cannot reach its store."""


class Unimplemented(FluxError):
    """No such operation: an rpc this server lacks, or an HTTP method a route does not take."""


class Internal(FluxError):
    """A fault of the server's own, not a refusal of the request: its log has the traceback."""


# error type -> (gRPC status code name, HTTP status); names, so that no grpc import is needed here.
STATUS: dict[type[FluxError], tuple[str, int]] = {
    InvalidArgument: ("INVALID_ARGUMENT", 422),
    NotFound: ("NOT_FOUND", 404),
    AlreadyExists: ("ALREADY_EXISTS", 409),
    FailedPrecondition: ("FAILED_PRECONDITION", 409),
    Unauthenticated: ("UNAUTHENTICATED", 401),
    PermissionDenied: ("PERMISSION_DENIED", 403),
    ResourceExhausted: ("RESOURCE_EXHAUSTED", 413),
    Unavailable: ("UNAVAILABLE", 503),
    # 405 rather than 501: over HTTP it is the method of an existing route that is wrong.
    Unimplemented: ("UNIMPLEMENTED", 405),
    Internal: ("INTERNAL", 500),
}

# Answers the HTTP server gives before a request reaches the app (no route ran, so no
# error type applies): HTTP status -> the gRPC status name its body carries.
BEFORE_THE_APP: dict[int, str] = {
    408: "DEADLINE_EXCEEDED",  # the request head did not arrive in time
    431: "RESOURCE_EXHAUSTED",  # the request head is over the size cap
    503: "UNAVAILABLE",  # the connection cap is reached
}

# The way back, for callers. A fault on the server's side is not the caller's to fix, and gRPC
# itself answers INTERNAL for some cut streams: callers see it as Unavailable, and retry.
_BY_GRPC_CODE = {code: error for error, (code, _) in STATUS.items() if error is not Internal}


def refusal(exc: Exception, unavailable: tuple[type[BaseException], ...] = ()) -> FluxError:
    """Any error a request handler raised, as the domain error it is answered with.

    Domain errors stand for themselves. ``unavailable`` names the errors that mean the store
    cannot be reached right now (its driver's connection errors: a database restarting, a
    pool timing out): those are ``Unavailable``, which callers retry. Anything else is a fault
    of the server's own: ``Internal``, with the error's type in the message.
    """
    if isinstance(exc, FluxError):
        return exc
    reason = f"{type(exc).__name__}: {str(exc).strip() or 'no message'}".replace("\n", " ")
    if isinstance(exc, unavailable):
        return Unavailable(f"the database is unavailable ({reason}); retry")
    return Internal(f"internal error ({reason}); the server's log has the details")


def status_of(error: FluxError) -> tuple[grpc.StatusCode, int]:
    import grpc

    for cls in type(error).__mro__:
        if cls in STATUS:
            code, http = STATUS[cls]  # type: ignore[index]
            return grpc.StatusCode[code], http
    return grpc.StatusCode.INTERNAL, 500


def from_http_status(status: int, message: str) -> FluxError:
    """The error an HTTP-layer refusal (unknown route, wrong method, unreadable body) stands for.

    400 means the body could not be read as JSON: the same INVALID_ARGUMENT as any other bad
    input, so it is answered with that error's status. Statuses the table does not name fall
    back to INVALID_ARGUMENT (4xx) or UNAVAILABLE (5xx).
    """
    if status == 400:
        return InvalidArgument(message)
    for error, (_, http_status) in STATUS.items():
        if http_status == status and error is not Internal:  # as in _BY_GRPC_CODE: retried
            return error(message)
    return (Unavailable if status >= 500 else InvalidArgument)(message)


def from_grpc_code(code: grpc.StatusCode, message: str) -> FluxError:
    """Rebuild the domain error a server sent, for clients (the inverse of ``STATUS``)."""
    return from_code_name(code.name, message)


def from_rpc_error(exc: grpc.aio.AioRpcError) -> FluxError:
    """``from_grpc_code`` for a failed call: its details, or its code's name when it sent none."""
    return from_grpc_code(exc.code(), exc.details() or exc.code().name)


def from_code_name(name: str, message: str) -> FluxError:
    """The same, from a status name as a batch's per-item answer carries it (an unknown one is retried)."""
    return _BY_GRPC_CODE.get(name, Unavailable)(message)


def logged_refusal(
    exc: Exception, unavailable: tuple[type[BaseException], ...], log: logging.Logger, what: str = "a request"
) -> FluxError:
    """``refusal``, logged as it deserves: a fault of the server's own with its traceback; the
    store's unavailability as one line, not a traceback per request while it restarts."""
    error = refusal(exc, unavailable)
    if isinstance(error, Internal):
        log.error("%s failed", what, exc_info=exc)
    elif error is not exc:
        log.warning("%s met an unavailable store: %s", what, error)
    return error
