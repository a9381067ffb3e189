"""The span tree of a run that waited for a busy worker (docs/guides/tracing.md).

Starts a server and a one-core worker on 127.0.0.1 (``flux.testing.Cluster``, ports
chosen by the system) with ``OTEL_TRACES_EXPORTER=console``, so each process prints
its spans with the SDK's console exporter; this script's own client prints its
``flux.submit`` the same way. Two one-core runs are submitted: the second waits for
the first. Once the processes have stopped (and flushed), the spans they printed are
read back and drawn as the second run's tree.

    .venv/bin/python examples/tracing.py

Needs the ``otel`` extra (``pip install -e '.[otel]'``; ``make install`` has it).
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import tempfile
from datetime import datetime
from pathlib import Path

WORKFLOW = """
import asyncio

from opentelemetry import trace

from flux import workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="step", requests=ResourceRequest(cpu=1))
async def step(ctx):
    # The workflow's own span: it nests under flux.execute.
    with trace.get_tracer("example").start_as_current_span("step.work"):
        await asyncio.sleep(ctx.input)
    return ctx.input
"""


def spans_in(text: str) -> list[dict]:
    """The span objects the console exporter printed, among whatever else the process wrote."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        if at and text[at - 1] != "\n":  # console spans start at the start of a line
            at += 1
            continue
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        if isinstance(value, dict) and "context" in value and "name" in value:
            found.append(value)
        at = end
    return found


def _time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def draw(spans: list[dict], trace_id: str) -> list[str]:
    """The trace's spans as a tree: name, service, start and end from the root's start, notes."""
    mine = [s for s in spans if s["context"]["trace_id"] == trace_id]
    ids = {s["context"]["span_id"] for s in mine}
    children: dict[str | None, list[dict]] = {}
    for s in mine:
        parent = s["parent_id"] if s["parent_id"] in ids else None
        children.setdefault(parent, []).append(s)
    for group in children.values():
        group.sort(key=lambda s: (_time(s["start_time"]), s["name"]))
    roots = children.get(None, [])
    origin = min(_time(s["start_time"]) for s in roots)
    lines: list[str] = []

    def walk(span: dict, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└── " if last else "├── ")
        start, end = _time(span["start_time"]) - origin, _time(span["end_time"]) - origin
        service = span["resource"]["attributes"].get("service.name", "")
        notes = [f"{e['name']} at {_time(e['timestamp']) - origin:.3f}s" for e in span.get("events", [])]
        worker = span["attributes"].get("flux.worker")
        if worker and span["name"] == "flux.dispatch":
            notes.append(f"to {worker}")
        label = f"{prefix}{branch}{span['name']}"
        lines.append(f"{label:<28} {service:<12} {start:7.3f}s → {end:7.3f}s  {', '.join(notes)}".rstrip())
        kids = children.get(span["context"]["span_id"], [])
        for i, kid in enumerate(kids):
            walk(kid, prefix + ("" if top else ("    " if last else "│   ")), i == len(kids) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    return lines


def main() -> int:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        print("this example needs the otel extra: pip install -e '.[otel]'", file=sys.stderr)
        return 1
    from flux.observe import tracing
    from flux.testing import Cluster

    # Only this cluster's settings: not the shell's server, tokens or collector.
    for key in [k for k in os.environ if k.startswith(("FLUX_", "OTEL_"))]:
        del os.environ[key]
    os.environ.update(OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="50")

    client_out = io.StringIO()
    provider = TracerProvider(resource=Resource.create({"service.name": "flux-client"}))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=client_out)))
    tracing.use(provider)

    with tempfile.TemporaryDirectory(prefix="flux-tracing-") as workdir:
        directory = Path(workdir)
        (directory / "step.py").write_text(WORKFLOW)
        cluster = Cluster(directory)
        try:
            cluster.start_server("--no-http")
            cluster.register(directory / "step.py")
            # One core, offered whatever else loads this machine: one step at a time.
            # --prefetch 0: the second run waits in the server's line (its flux.queued span), not in
            # the worker's own queue, which would dispatch it at once.
            worker = cluster.start_worker(
                "w1", "--cpus", "1", "--prefetch", "0", env={"FLUX_SIMULATED_CPU_BUSY": "0"}
            )
            first = cluster.client.run("step", 1.0)
            second = cluster.client.run("step", 0.2)  # waits until the first frees the core
            cluster.wait_all([first.execution_id, second.execution_id], timeout=60)
            # Stopped, not killed: each process flushes its spans as it exits.
            assert cluster.server is not None
            for process in (worker, cluster.server):
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
            # Console spans go to each process's stderr, which the cluster keeps in its logs.
            printed = client_out.getvalue() + (directory / "server.log").read_text()
            printed += (directory / "worker-w1.log").read_text()
        finally:
            cluster.close()
    tracing.use(None)

    spans = spans_in(printed)
    (submit,) = [
        s
        for s in spans
        if s["name"] == "flux.submit" and s["attributes"].get("flux.execution.id") == second.execution_id
    ]
    print(f"execution {second.execution_id}, trace {submit['context']['trace_id'][2:]}:")
    for line in draw(spans, submit["context"]["trace_id"]):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
