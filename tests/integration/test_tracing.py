"""One trace per execution, from the client through the core to the worker (the site's "Trace executions", docs/guides/tracing.md).

The client's spans are read from the SDK's in-memory exporter in this process; the server's and
the workers' come over OTLP/gRPC to a real collector TraceService started here (otlp.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flux import aio
from flux.observe import tracing
from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

from .otlp import Receiver, Span
from .test_node_client import FLUX_JS, flux_node, node_env
from .test_node_client import node as node_binary  # noqa: F401 - a fixture, named by this name here

pytestmark = pytest.mark.integration

TRACED = Path(__file__).with_name("traced_workflows.py")
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
CREATED = control_pb2.EXECUTION_STATE_CREATED
RUNNING = control_pb2.EXECUTION_STATE_RUNNING
WORKER_SPANS = ("flux.claim", "flux.execute", "flux.complete")


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """The collector every process started by the test exports to (their environment says so)."""
    found = Receiver()
    for key, value in found.env().items():
        monkeypatch.setenv(key, value)
    try:
        yield found
    finally:
        found.close()


@pytest.fixture
def client_spans() -> Iterator[InMemorySpanExporter]:
    """This process's FluxClient traces into memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()


def submits(exporter: InMemorySpanExporter) -> dict[str, Span]:
    """The client's flux.submit spans by execution id."""
    found = {}
    for s in exporter.get_finished_spans():
        if s.name != "flux.submit":
            continue
        found[str(s.attributes["flux.execution.id"])] = Span(
            name=s.name,
            service="client",
            trace_id=f"{s.context.trace_id:032x}",
            span_id=f"{s.context.span_id:016x}",
            parent_id=f"{s.parent.span_id:016x}" if s.parent else "",
            kind=s.kind.value,
            start=s.start_time / 1e9,
            end=s.end_time / 1e9,
            attributes=dict(s.attributes),
            events=(),
            links=(),
        )
    return found


def spans_of(receiver: Receiver, trace_id: str, names: dict[str, int]) -> dict[str, list[Span]]:
    """The trace's spans by name, once at least ``names[name]`` of each have arrived."""

    def arrived() -> dict[str, list[Span]] | None:
        by_name: dict[str, list[Span]] = {}
        for s in receiver.spans():
            if s.trace_id == trace_id:
                by_name.setdefault(s.name, []).append(s)
        if all(len(by_name.get(name, ())) >= count for name, count in names.items()):
            return by_name
        return None

    return eventually(
        arrived,
        timeout=30,
        what=lambda: f"spans {names} of trace {trace_id}; have {sorted({s.name for s in receiver.spans()})}",
    )


def assert_whole(receiver: Receiver, submit: Span, attempts: int = 1) -> dict[str, list[Span]]:
    """The trace from ``submit``: queued and dispatch under it, the worker's spans under the
    dispatch of the last attempt, and the workflow's own span under flux.execute."""
    spans = spans_of(
        receiver,
        submit.trace_id,
        {"flux.queued": attempts, "flux.dispatch": attempts, **dict.fromkeys(WORKER_SPANS, 1)},
    )
    for name in ("flux.queued", "flux.dispatch"):
        for s in spans[name]:
            assert s.parent_id == submit.span_id, f"{name} is not under the client's flux.submit"
            assert s.service == "flux-server"
    last = max(spans["flux.dispatch"], key=lambda s: s.attributes["flux.generation"])
    for name in WORKER_SPANS:
        (s,) = [s for s in spans[name] if s.parent_id == last.span_id]
        assert s.service == "flux-worker"
        assert s.attributes["flux.execution.id"] == submit.attributes["flux.execution.id"]
    (execute,) = [s for s in spans["flux.execute"] if s.parent_id == last.span_id]
    user = [s for s in receiver.spans() if s.name.startswith("user.") and s.trace_id == submit.trace_id]
    assert [s.parent_id for s in user] == [execute.span_id], "the workflow's span is not under flux.execute"
    return spans


def test_one_trace_from_the_client_to_the_worker_and_the_queued_span_covers_the_wait(
    tmp_path: Path, transport: str, receiver: Receiver, client_spans: InMemorySpanExporter
) -> None:
    cluster = Cluster(tmp_path, transport)
    release = tmp_path / "release"
    try:
        cluster.start_server()
        cluster.register(TRACED)
        # --prefetch 0: the second waits in the server's line (what flux.queued covers), not
        # queued ahead at the worker.
        cluster.start_worker("w1", "--cpus", "1", "--prefetch", "0")
        client = cluster.client
        first = client.run("traced_step", str(release))
        eventually(lambda: client.get(first.execution_id).state == RUNNING, what="the first to run")
        # The worker's one core is taken until the test releases it: the second must wait.
        second = client.run("traced_blocking", None)
        assert client.get(second.execution_id).state == CREATED
        release.touch()
        for final in cluster.wait_all([first.execution_id, second.execution_id]):
            assert final.state == COMPLETED
        submitted = submits(client_spans)
        one, two = submitted[first.execution_id], submitted[second.execution_id]
        assert one.trace_id != two.trace_id, "each execution is its own trace"
        spans_one = assert_whole(receiver, one)
        spans_two = assert_whole(receiver, two)
        (queued,) = spans_two["flux.queued"]
        # It waited from its acceptance (inside the client's call) until the first one's run ended.
        assert one.start <= queued.start <= two.end
        (execute_one,) = spans_one["flux.execute"]
        assert queued.end >= execute_one.end
        assert "busy" in [name for name, _, _ in queued.events]
        assert queued.attributes["flux.queue.position"] == 0  # executions of its shape ahead of it
        assert queued.attributes["flux.shape"]
        (dispatch,) = spans_two["flux.dispatch"]
        assert dispatch.attributes["flux.worker"] == "w1"
        # The latency histograms link their buckets to these traces (OpenMetrics exemplars).
        scraped = httpx.get(
            f"{cluster.gateway_url}/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=10
        )
        assert scraped.headers["content-type"].startswith("application/openmetrics-text")
        assert f'trace_id="{one.trace_id}"' in scraped.text or f'trace_id="{two.trace_id}"' in scraped.text
    finally:
        cluster.close()


@pytest.mark.transports("grpc")
def test_a_requeue_after_a_worker_sigkill_is_a_second_attempt_linked_to_the_first(
    tmp_path: Path, transport: str, receiver: Receiver, client_spans: InMemorySpanExporter
) -> None:
    cluster = Cluster(tmp_path, transport)
    release = tmp_path / "release"
    try:
        cluster.start_server("--grace-period", "1", "--ack-deadline", "2", "--safety-tick", "1")
        cluster.register(TRACED)
        doomed = cluster.start_worker("doomed", "--cpus", "1")
        execution = cluster.client.run("traced_step", str(release))
        eventually(lambda: cluster.client.get(execution.execution_id).state == RUNNING, what="it to run")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=10)
        cluster.start_worker("survivor", "--cpus", "1")
        release.touch()
        final = cluster.client.wait(execution.execution_id, timeout=60)
        assert final.state == COMPLETED and final.worker == "survivor"
        submit = submits(client_spans)[execution.execution_id]
        spans = assert_whole(receiver, submit, attempts=2)
        first, second = sorted(spans["flux.dispatch"], key=lambda s: s.attributes["flux.generation"])
        assert (first.attributes["flux.attempt"], second.attributes["flux.attempt"]) == (1, 2)
        assert first.attributes["flux.worker"] == "doomed" and second.attributes["flux.worker"] == "survivor"
        assert second.links == ((first.trace_id, first.span_id),), "the new attempt links to the previous one"
        queued_again = max(spans["flux.queued"], key=lambda s: s.attributes["flux.generation"])
        assert queued_again.links == ((first.trace_id, first.span_id),)
        assert queued_again.start >= first.end  # the second wait began at the requeue
    finally:
        cluster.close()


@pytest.mark.transports("grpc")
def test_a_server_restart_between_submission_and_dispatch_keeps_the_trace(
    tmp_path: Path, transport: str, receiver: Receiver, client_spans: InMemorySpanExporter
) -> None:
    cluster = Cluster(tmp_path, transport)
    try:
        cluster.start_server()
        cluster.register(TRACED)
        # Submitted by the asyncio client: its flux.submit is the trace's root too.
        execution = asyncio.run(_submit_async(cluster, "traced_blocking"))
        assert cluster.client.get(execution.execution_id).state == CREATED  # no worker yet
        assert cluster.server is not None
        cluster.server.terminate()
        cluster.server.wait(timeout=30)
        cluster.restart_server()
        cluster.start_worker("w1")
        final = cluster.client.wait(execution.execution_id, timeout=60)
        assert final.state == COMPLETED
        submit = submits(client_spans)[execution.execution_id]
        spans = assert_whole(receiver, submit)
        (queued,) = spans["flux.queued"]
        assert submit.start <= queued.start <= submit.end  # from its acceptance, before the restart
    finally:
        cluster.close()


async def _submit_async(cluster: Cluster, workflow: str) -> control_pb2.Execution:
    async with aio.FluxClient(cluster.address, credentials=cluster.credentials(Role.CLIENT)) as client:
        return await client.run(workflow, None)


def test_two_postgresql_replicas_keep_the_trace_whole(
    tmp_path: Path, pg_url: str, receiver: Receiver, client_spans: InMemorySpanExporter
) -> None:
    cluster = Cluster(tmp_path, db=pg_url)
    try:
        cluster.start_server("--safety-tick", "1")
        other = cluster.start_replica("--safety-tick", "1")
        cluster.register(TRACED)
        # Accepted by the first replica, dispatched by the second (the only one with a worker).
        cluster.start_worker("w1", servers=[other])
        # Run and wait in one call (RunAndWait): its receipt is the client's flux.submit.
        final = cluster.client.run("traced_blocking", None, wait=True, timeout=60)
        assert final.state == COMPLETED
        assert_whole(receiver, submits(client_spans)[final.execution_id])
    finally:
        cluster.close()


@pytest.mark.transports("sse")
def test_a_traceparent_header_on_the_gateway_joins_the_callers_trace(
    tmp_path: Path, transport: str, receiver: Receiver
) -> None:
    cluster = Cluster(tmp_path, transport)
    trace_id, caller = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        cluster.start_server()
        cluster.register(TRACED)
        cluster.start_worker("w1")
        answer = httpx.post(
            f"{cluster.gateway_url}/workflows/traced_blocking/run",
            json={"input": None, "wait": True, "timeout": 60},
            headers={
                "Authorization": f"Bearer {cluster.token(Role.CLIENT)}",
                "traceparent": f"00-{trace_id}-{caller}-01",
                "tracestate": "vendor=opaque",
            },
            timeout=30,
        )
        # Run and wait in one request (RunAndWait to the core): the caller's context went with it.
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "EXECUTION_STATE_COMPLETED"
        execution_id = answer.json()["execution_id"]
        spans = spans_of(receiver, trace_id, {"POST /workflows/{name}/run": 1, "flux.execute": 1})
        (route,) = spans["POST /workflows/{name}/run"]
        assert route.parent_id == caller and route.attributes["http.route"] == "/workflows/{name}/run"
        (queued,) = spans["flux.queued"]
        # Under the gateway's server span (FastAPI's handler spans may stand between them).
        by_id = {x.span_id: x for x in receiver.spans() if x.trace_id == trace_id}
        ancestors, at = [], queued.parent_id
        while at in by_id and len(ancestors) < 20:
            ancestors.append(at)
            at = by_id[at].parent_id
        assert route.span_id in ancestors and at == caller
        (execute,) = spans["flux.execute"]
        assert execute.attributes["flux.execution.id"] == execution_id
    finally:
        cluster.close()


NODE_WORKFLOW = "// run by the Node worker's echo\n"


@pytest.mark.transports("grpc")
def test_the_node_client_propagates_the_callers_context_and_the_node_worker_continues_it(
    node_binary: str,  # noqa: F811 - the fixture
    tmp_path: Path,
    transport: str,
    receiver: Receiver,
) -> None:
    node = node_binary
    cluster = Cluster(tmp_path, transport)
    trace_id, caller = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    worker = None
    try:
        cluster.start_server()
        code = tmp_path / "node_echo.js"
        code.write_text(NODE_WORKFLOW)
        registered = flux_node(
            node, cluster, "register", str(code), "--name", "node_echo", "--runtime", "node"
        )
        assert registered.returncode == 0, registered.stderr
        worker = subprocess.Popen(
            [node, str(FLUX_JS), "worker", "nodew", "--max-executions", "1", "--cpus", "1"],
            env=node_env(cluster),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        eventually(lambda: cluster.worker_connected("nodew"), what="the Node worker to connect")
        ran = subprocess.run(
            [node, str(FLUX_JS), "run", "node_echo", '{"n": 1}', "--wait", "--timeout", "60"],
            env={**node_env(cluster), "TRACEPARENT": f"00-{trace_id}-{caller}-01", "TRACESTATE": "k=v"},
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert ran.returncode == 0, ran.stderr
        output = json.loads(ran.stdout)["output"]
        spans = spans_of(receiver, trace_id, {"flux.queued": 1, "flux.dispatch": 1})
        (queued,), (dispatch,) = spans["flux.queued"], spans["flux.dispatch"]
        assert queued.parent_id == caller and dispatch.parent_id == caller
        # The Node worker got the dispatch's context and carried it on.
        assert output["trace"]["traceparent"].startswith(f"00-{trace_id}-{dispatch.span_id}-")
        assert output["trace"]["tracestate"] == "k=v"
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)
        cluster.close()


@pytest.mark.parametrize("value", ["00-xyz-1-01", "00-" + "0" * 32 + "-b7ad6b7169203331-01", "junk"])
def test_the_node_client_refuses_a_malformed_traceparent_by_name(node_binary: str, value: str) -> None:  # noqa: F811 - the fixture
    refused = subprocess.run(
        [node_binary, str(FLUX_JS), "run", "x"],
        env={**node_env(None), "TRACEPARENT": value},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 2 and "$TRACEPARENT" in refused.stderr, refused.stderr


@pytest.mark.transports("grpc")
def test_console_spans_go_to_stderr_so_a_commands_stdout_stays_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`OTEL_TRACES_EXPORTER=console` prints spans; `id=$(flux workflow run …)` still reads an id."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--no-http")
        cluster.register(Path(__file__).parents[2] / "examples" / "hello.py")
        cluster.start_worker("w1")
        submitted = cluster.flux("workflow", "run", "hello", '"ids"')
        assert submitted.returncode == 0, submitted.stderr
        assert re.fullmatch(r"[0-9a-f]{32}\n", submitted.stdout), submitted.stdout
        assert '"name": "flux.submit"' in submitted.stderr, submitted.stderr[-2000:]
        waited = cluster.flux("workflow", "run", "hello", '"spans"', "--wait")
        assert waited.returncode == 0, waited.stderr
        assert waited.stdout == '"Hello, spans!"\n', waited.stdout
        assert '"name": "flux.submit"' in waited.stderr
    finally:
        cluster.close()
