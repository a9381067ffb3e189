"""What tracing costs: start latency and throughput with tracing off, with the SDK on at 0%
sampling, and at 100% sampling (the site's "Trace executions", docs/guides/tracing.md).

Each mode is one real server (``--no-http``, SQLite) and four worker processes, as
``bench/dispatch.py`` measures them: ``start`` is submit -> the workflow body starts,
sequentially through the Python client; ``burst`` is trivial executions completed per
second, one RunWorkflow each, with the server's CPU per execution. The SDK modes export
over OTLP/gRPC to a sink started here (it counts the spans it gets and drops them):

- ``off``: no ``OTEL_*`` setting, what every deployment without a collector runs;
- ``sampled_0``: the SDK on, ``parentbased_traceidratio`` at 0: spans are started and
  dropped unsampled, nothing is exported;
- ``sampled_100``: ``parentbased_always_on``: every execution's spans are exported.

The modes run in turn, ``repeats`` rounds, so drift on a shared machine touches each
alike; the medians per mode are reported with each mode over ``off``.

    python -m bench tracing            # or: python -m bench.tracing [--modes off ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc

from bench.common import write
from bench.dispatch import WORKFLOWS, _connected, start_latency, throughput
from flux.testing import Cluster, eventually

MODES = ("off", "sampled_0", "sampled_100")
SEQUENTIAL = 300
BURST = 2000
REPEATS = 2


class _Sink:
    """An OTLP/gRPC TraceService that counts the spans it receives."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

        sink = self
        self.spans = 0
        self._lock = threading.Lock()

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802 - grpc's name
                count = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                with sink._lock:
                    sink.spans += count
                return trace_service_pb2.ExportTraceServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def close(self) -> None:
        self._server.stop(grace=None)


def _settings(mode: str, port: int) -> dict[str, str]:
    if mode == "off":
        return {}
    sampler = {"sampled_0": ("parentbased_traceidratio", "0"), "sampled_100": ("parentbased_always_on", "")}
    name, arg = sampler[mode]
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_TRACES_SAMPLER": name,
        **({"OTEL_TRACES_SAMPLER_ARG": arg} if arg else {}),
    }


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """The server and workers inherit this process's environment: set only ``values`` of OTEL_*."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(values)
    try:
        yield
    finally:
        for key in [k for k in os.environ if k.startswith("OTEL_")]:
            del os.environ[key]
        os.environ.update(saved)


def one(mode: str, sequential: int, burst: int, sink: _Sink | None) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"flux-bench-tracing-{mode}-") as tmp:
        cluster = Cluster(Path(tmp), "grpc")
        with _environment(_settings(mode, sink.port if sink else 0)):
            try:
                server = cluster.start_server("--no-http")
                cluster.register(WORKFLOWS)
                names = {"w1", "w2", "w3", "w4"}
                for name in sorted(names):
                    cluster.start_worker(name, "--capacity", "64")
                client = cluster.client
                eventually(lambda: _connected(client) == names)
                exported_before = sink.spans if sink else 0
                start = start_latency([client], sequential)
                burst_result = throughput(cluster, burst, str(Path(tmp) / "flux.db"), [server])
            finally:
                cluster.close()
    return {
        "start_p50_ms": start["submit_to_body_start_ms"]["p50"],  # type: ignore[index]
        "start_p99_ms": start["submit_to_body_start_ms"]["p99"],  # type: ignore[index]
        "sequential_per_second": start["sequential_per_second"],
        "completed_per_second": burst_result["completed_per_second"],
        "server_cpu_ms_per_execution": burst_result["server_cpu_ms_per_execution"],
        "stuck": burst_result["stuck"],
        "spans_exported": (sink.spans - exported_before) if sink else 0,
    }


def main(
    modes: Sequence[str] = MODES, sequential: int = SEQUENTIAL, burst: int = BURST, repeats: int = REPEATS
) -> dict[str, object]:
    sink = _Sink() if any(m != "off" for m in modes) else None
    runs: dict[str, list[dict[str, object]]] = {m: [] for m in modes}
    try:
        for _ in range(repeats):
            for mode in modes:
                runs[mode].append(one(mode, sequential, burst, sink))
    finally:
        if sink is not None:
            sink.close()
    medians = {
        mode: {key: statistics.median(float(r[key]) for r in rs) for key in rs[0]}  # type: ignore[arg-type]
        for mode, rs in runs.items()
    }
    result: dict[str, object] = {
        "sequential_executions": sequential,
        "burst_executions": burst,
        "repeats": repeats,
        "medians": medians,
        "runs": runs,
    }
    if "off" in medians:
        base = medians["off"]
        result["over_off"] = {
            mode: {
                key: round(m[key] / base[key], 3)
                for key in ("start_p50_ms", "completed_per_second", "server_cpu_ms_per_execution")
                if base[key]
            }
            for mode, m in medians.items()
            if mode != "off"
        }
    write("tracing", result)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.tracing")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--sequential", type=int, default=SEQUENTIAL)
    parser.add_argument("--burst", type=int, default=BURST)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    options = parser.parse_args()
    main(options.modes, options.sequential, options.burst, options.repeats)
