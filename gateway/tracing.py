"""The gateway's part of a trace (flux/tracing.py): a submission's W3C context goes on to the core.

A caller's ``traceparent``/``tracestate`` headers travel to the core as gRPC metadata, so the
execution joins the caller's trace. Where the gateway itself traces (OTEL_* settings), the
call is a SERVER span with the HTTP semantic-convention attributes (FastAPI's own, where it
made one; ours otherwise), and that span is what the core continues. Untraced and without
the headers, nothing is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fastapi import Request

from flux import tracing


@contextlib.contextmanager
def submitting(request: Request, route: str) -> Iterator[tuple[tuple[str, str], ...]]:
    """The gRPC metadata carrying the submission's context, for the call made inside the block."""
    incoming = request.headers.get(tracing.TRACEPARENT)
    if not tracing.ACTIVE:
        if incoming is None:
            yield ()
        else:
            yield tracing.metadata(tracing.headers(request.headers))
        return
    served = tracing.current()
    if served:  # FastAPI's own server span (it calls the OpenTelemetry API itself): continue it
        yield tracing.metadata(served)
        return
    attributes = {
        "http.request.method": request.method,
        "http.route": route,
        "url.scheme": request.url.scheme,
        "server.address": request.url.hostname or "",
    }
    parent = tracing.headers(request.headers) if incoming is not None else ""
    with tracing.span(f"{request.method} {route}", parent, "SERVER", **attributes) as span:
        yield tracing.metadata(tracing.carrier_of(span))
