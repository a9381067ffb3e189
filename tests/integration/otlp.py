"""A real OTLP/gRPC trace receiver for tests: the collector's TraceService on 127.0.0.1:0.

Processes started with ``Receiver.env()`` export their spans here over the OTLP exporter
the ``otel`` extra installs; the test reads them back as plain ``Span`` records.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def _value(any_value: Any) -> object:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@dataclass(frozen=True)
class Span:
    name: str
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    start: float  # seconds since the epoch
    end: float
    attributes: dict[str, object]
    events: tuple[tuple[str, float, dict[str, object]], ...]
    links: tuple[tuple[str, str], ...]  # (trace id, span id)
    status: int = 0
    source: str = "otlp"
    extra: dict[str, object] = field(default_factory=dict)


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def Export(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802 - grpc's name
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    received.append(
                        Span(
                            name=s.name,
                            service=str(resource.get("service.name", "")),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            start=s.start_time_unix_nano / 1e9,
                            end=s.end_time_unix_nano / 1e9,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            events=tuple(
                                (
                                    e.name,
                                    e.time_unix_nano / 1e9,
                                    {a.key: _value(a.value) for a in e.attributes},
                                )
                                for e in s.events
                            ),
                            links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links),
                            status=s.status.code,
                        )
                    )
        with self._lock:
            self._spans.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def env(self) -> dict[str, str]:
        """What a process needs to export here, promptly (a short batch delay)."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
        }

    def close(self) -> None:
        self._server.stop(grace=None)
