"""OpenTelemetry traces: set up from the standard ``OTEL_*`` settings, and W3C context on the wire.

One trace per execution, whatever path it takes (docs/guides/tracing.md). The client's context
(W3C ``traceparent``/``tracestate``) travels in gRPC metadata and HTTP headers; the core
stores it with the execution (``Execution.trace``, a *carrier*: ``"traceparent[ tracestate]"``)
and hands each dispatch's context to the worker in ``ExecutionScheduled.trace``.

Only the OpenTelemetry API is a dependency. The SDK and its OTLP exporter are the ``otel``
extra, and a process records spans only when ``setup`` finds them asked for:
``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``) or an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``,
and not ``OTEL_SDK_DISABLED=true``. Sampling, service name, batching and the endpoint are the
SDK's own ``OTEL_*`` settings. Otherwise ``ACTIVE`` stays False, the hot paths check only that
flag, and no span, attribute or context object is built per execution.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

log = logging.getLogger("flux.observe.tracing")

# Set once per process (``setup``, ``use``); read by every hot path before it builds anything.
ACTIVE = False
_tracer: Any = None  # opentelemetry.trace.Tracer while ACTIVE
_provider: Any = None  # the SDK provider ``setup`` made (flushed by ``shutdown``)

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
INSTRUMENTATION = "flux"


def _asked_for() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def setup(service: str) -> bool:
    """Record spans if the ``OTEL_*`` settings ask for it (once per process); True when recording.

    ``service`` is the default ``service.name`` (``OTEL_SERVICE_NAME`` wins). A process that
    asks for traces without the ``otel`` extra gets one warning and runs untraced.
    """
    global _provider
    if ACTIVE or not _asked_for():
        return ACTIVE
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning(
            "OTEL_* settings ask for traces but the SDK is missing: pip install 'flux-dispatch[otel]'"
        )
        return False
    attributes = {}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes["service.name"] = service
    provider = TracerProvider(resource=Resource.create(attributes))  # the sampler from OTEL_TRACES_SAMPLER
    names = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporting = False
    for name in (n.strip() for n in names.split(",")):
        if name == "console":
            # On stderr, beside the logs: stdout is what a command answers (`id=$(flux workflow
            # run …)` must read an id, not spans), and the SDK's default is stdout.
            exporter: Any = ConsoleSpanExporter(out=sys.stderr)
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            except ImportError:
                log.warning("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-grpc")
                continue
            exporter = OTLPSpanExporter()  # endpoint, headers, TLS: OTEL_EXPORTER_OTLP_*
        else:
            log.warning("OTEL_TRACES_EXPORTER=%s is not one of otlp, console, none; ignored", name)
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
        exporting = True
    if not exporting:
        return False  # nothing would leave the process: record nothing
    trace.set_tracer_provider(provider)
    _provider = provider
    use(provider)
    return True


def use(provider: Any | None) -> None:
    """Record with ``provider`` from now on (None: stop). For ``setup``, tests, and embedders."""
    global ACTIVE, _tracer
    if provider is None:
        ACTIVE, _tracer = False, None
        return
    _tracer = provider.get_tracer(INSTRUMENTATION)
    ACTIVE = True


def adopt() -> bool:
    """Record too when the host process set up its own SDK provider (a script that uses FluxClient).

    Checked once per client: only where the SDK is already imported, never importing it here.
    """
    if ACTIVE or "opentelemetry.sdk.trace" not in sys.modules:
        return ACTIVE
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if type(provider).__name__ in ("ProxyTracerProvider", "NoOpTracerProvider"):
        return False
    use(provider)
    return True


def shutdown() -> None:
    """Export what is buffered (a process about to exit)."""
    if _provider is not None:
        with contextlib.suppress(Exception):
            _provider.shutdown()


def tracer() -> Any:
    return _tracer


# ------------------------------------------------------------------ carriers


def carrier(traceparent: str, tracestate: str = "") -> str:
    """The stored form of a context: ``traceparent``, then ``tracestate`` after one space."""
    if not traceparent:
        return ""
    return f"{traceparent} {tracestate}" if tracestate else traceparent


def split(text: str) -> tuple[str, str]:
    """(traceparent, tracestate) of a carrier."""
    traceparent, _, tracestate = text.partition(" ")
    return traceparent, tracestate


def from_pairs(pairs: Sequence[tuple[str, Any]] | None) -> str:
    """The carrier in gRPC metadata or HTTP headers (keys lower case); "" when none or malformed."""
    traceparent = tracestate = ""
    for key, value in pairs or ():
        if key == TRACEPARENT and isinstance(value, str):
            traceparent = value.strip()
        elif key == TRACESTATE and isinstance(value, str):
            tracestate = value.strip()
    if not _well_formed(traceparent):
        return ""  # a bad header starts no trace and refuses nothing: it is only a hint
    return carrier(traceparent, tracestate[:512])


def _well_formed(traceparent: str) -> bool:
    # version-traceid-spanid-flags, lower-case hex (W3C Trace Context §3.2)
    parts = traceparent.split("-")
    if len(parts) < 4 or [len(p) for p in parts[:4]] != [2, 32, 16, 2]:
        return False
    if parts[0] == "ff" or set(parts[1]) == {"0"} or set(parts[2]) == {"0"}:
        return False
    return all(c in "0123456789abcdef" for c in "".join(parts[:4]))


def context_of(text: str) -> Any:
    """An OpenTelemetry Context whose parent is the carrier's span (None when there is none)."""
    if not text:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    traceparent, tracestate = split(text)
    headers = {TRACEPARENT: traceparent}
    if tracestate:
        headers[TRACESTATE] = tracestate
    return TraceContextTextMapPropagator().extract(headers)


def link_to(text: str) -> Any:
    """A span link to the carrier's span (None when there is none)."""
    if not text:
        return None
    from opentelemetry import trace

    span_context = trace.get_current_span(context_of(text)).get_span_context()
    return trace.Link(span_context) if span_context.is_valid else None


def carrier_of(span: Any) -> str:
    """The carrier naming ``span`` as the parent."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    headers: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(headers, trace.set_span_in_context(span))
    return carrier(headers.get(TRACEPARENT, ""), headers.get(TRACESTATE, ""))


def current() -> str:
    """The carrier of the caller's current span ("" outside any, or without OpenTelemetry loaded)."""
    if "opentelemetry.trace" not in sys.modules:
        return ""
    from opentelemetry import trace

    span = trace.get_current_span()
    return carrier_of(span) if span.get_span_context().is_valid else ""


def metadata(text: str) -> tuple[tuple[str, str], ...]:
    """gRPC metadata (or HTTP headers) carrying a carrier."""
    if not text:
        return ()
    traceparent, tracestate = split(text)
    return (
        ((TRACEPARENT, traceparent), (TRACESTATE, tracestate))
        if tracestate
        else ((TRACEPARENT, traceparent),)
    )


def headers(pairs: Mapping[str, str]) -> str:
    """The carrier in a header mapping (any key case)."""
    return from_pairs([(k.lower(), v) for k, v in pairs.items() if k.lower() in (TRACEPARENT, TRACESTATE)])


@contextlib.contextmanager
def span(name: str, parent: str = "", kind: str = "INTERNAL", **attributes: Any) -> Iterator[Any]:
    """A span named ``name``, current while the block runs, under ``parent`` (a carrier) or the
    current span. The block's exception is recorded with ``error.type``. Only while ACTIVE."""
    from opentelemetry.trace import SpanKind, Status, StatusCode

    with _tracer.start_as_current_span(
        name,
        context=context_of(parent) if parent else None,
        kind=getattr(SpanKind, kind),
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as current_span:
        try:
            yield current_span
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                current_span.set_attribute("error.type", type(exc).__qualname__)
                current_span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            raise


def start(name: str, parent: str = "", kind: str = "INTERNAL", **attributes: Any) -> Any:
    """A started span, not made current, under ``parent`` (a carrier) or the current span; the
    caller ends it. Only while ACTIVE."""
    from opentelemetry.trace import SpanKind

    return _tracer.start_span(
        name,
        context=context_of(parent) if parent else None,
        kind=getattr(SpanKind, kind),
        attributes=attributes,
    )


def submit_attributes(address: str, method: str, workflow: str) -> dict[str, Any]:
    """A ``flux.submit`` span's attributes (the RPC semantic conventions, and the workflow)."""
    return {
        "rpc.system": "grpc",
        "rpc.service": "flux.v1.ControlService",
        "rpc.method": method,
        "server.address": address.rpartition(":")[0] or address,
        "flux.workflow.name": workflow,
    }


def submitted(span: Any, answer: Any) -> None:
    """Name on ``span`` what a RunWorkflow, RunWorkflows or RunAndWait answer accepted."""
    executions = getattr(answer, "executions", None)
    ids = [e.execution_id for e in executions] if executions is not None else [answer.execution_id]
    if len(ids) == 1:
        span.set_attribute("flux.execution.id", ids[0])
    span.set_attribute("flux.executions", len(ids))
