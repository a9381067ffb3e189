"""The gateway's part of a trace (flux/observe/tracing.py): a submission's W3C context goes on to the core.

A caller's ``traceparent``/``tracestate`` headers travel to the core as gRPC metadata on the
calls a run route makes (RunWorkflow, RunAndWait, RunWorkflows), so the execution joins the
caller's trace. Where the gateway itself traces (OTEL_* settings), the context is that of
the request's server span (FastAPI makes one through the OpenTelemetry API; where it did
not, one is made here with the HTTP semantic-convention attributes). Untraced and without
the headers, nothing is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from fastapi import Request

from flux.observe import tracing

# Metadata for the core calls made in a ``submitting`` block (gateway.core adds it to each call).
_OUTGOING: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("flux_trace_metadata", default=())


def outgoing() -> tuple[tuple[str, str], ...]:
    return _OUTGOING.get()


@contextlib.contextmanager
def _sending(metadata: tuple[tuple[str, str], ...]) -> Iterator[None]:
    token = _OUTGOING.set(metadata)
    try:
        yield
    finally:
        _OUTGOING.reset(token)


@contextlib.contextmanager
def submitting(request: Request, route: str) -> Iterator[None]:
    """Calls to the core made inside the block carry the submission's trace context."""
    incoming = request.headers.get(tracing.TRACEPARENT)
    if not tracing.ACTIVE:
        if incoming is None:
            yield
        else:
            with _sending(tracing.metadata(tracing.headers(request.headers))):
                yield
        return
    served = tracing.current()
    if served:  # FastAPI's own server span: continue it
        with _sending(tracing.metadata(served)):
            yield
        return
    attributes = {
        "http.request.method": request.method,
        "http.route": route,
        "url.scheme": request.url.scheme,
        "server.address": request.url.hostname or "",
    }
    parent = tracing.headers(request.headers) if incoming is not None else ""
    with (
        tracing.span(f"{request.method} {route}", parent, "SERVER", **attributes) as span,
        _sending(tracing.metadata(tracing.carrier_of(span))),
    ):
        yield
