"""Tracing's pure parts (W3C carriers, when setup records) and the core's spans, read from the
SDK's in-memory exporter over a dispatcher with an in-memory store and a hand-driven clock.

What ``setup`` does in a fresh interpreter is tests/integration/test_tracing_setup.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from flux.dispatcher.state.lifecycle import Histogram
from flux.dispatcher.state.session import Scheduled
from flux.domain.execution import State
from flux.observe import tracing
from flux.server import worker_convert
from flux.v1 import control_pb2, trace_pb2
from gateway.observe import metrics
from tests.unit.harness import GRACE, Flux, settled

pytestmark = pytest.mark.timeout(10)

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID, PARENT_ID = int("4bf92f3577b34da6a3ce929d0e0e4736", 16), int("00f067aa0ba902b7", 16)


@pytest.mark.parametrize(
    "pairs, expected",
    [
        pytest.param([("traceparent", PARENT)], PARENT, id="traceparent alone"),
        pytest.param(
            [("tracestate", "a=1,b=2"), ("traceparent", PARENT)], f"{PARENT} a=1,b=2", id="with tracestate"
        ),
        pytest.param([("traceparent", PARENT.upper())], "", id="upper-case hex refused"),
        pytest.param([("traceparent", "00-" + "0" * 32 + "-00f067aa0ba902b7-01")], "", id="zero trace id"),
        pytest.param([("traceparent", "00-4bf92f35-00f067aa0ba902b7-01")], "", id="short trace id"),
        pytest.param([("traceparent", "ff" + PARENT[2:])], "", id="version ff"),
        pytest.param([("tracestate", "a=1")], "", id="tracestate without traceparent"),
        pytest.param([("authorization", "Bearer x")], "", id="none"),
        pytest.param(None, "", id="no metadata"),
    ],
)
def test_a_carrier_is_read_from_metadata_only_when_well_formed(pairs, expected) -> None:
    assert tracing.from_pairs(pairs) == expected


def test_a_carrier_round_trips_through_metadata_and_headers() -> None:
    text = tracing.carrier(PARENT, "vendor=x")
    assert tracing.split(text) == (PARENT, "vendor=x")
    assert tracing.from_pairs(tracing.metadata(text)) == text
    assert tracing.headers({"TraceParent": PARENT, "TraceState": "vendor=x", "Accept": "*/*"}) == text
    assert tracing.metadata("") == () and tracing.carrier("", "x") == ""


@pytest.mark.parametrize(
    "env, asked",
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, False),
    ],
)
def test_spans_are_recorded_only_where_otel_settings_ask_for_an_exporter(monkeypatch, env, asked) -> None:
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert tracing._asked_for() is asked
    if not asked:
        assert tracing.setup("flux-test") is False and tracing.ACTIVE is False


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(found))
    tracing.use(provider)
    try:
        yield found
    finally:
        tracing.use(None)


@pytest.fixture
async def traced(exporter: InMemorySpanExporter) -> Iterator[Flux]:
    f = await Flux().start()  # made while tracing is on
    yield f
    await f.d.stop()


def named(exporter: InMemorySpanExporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def test_untraced_nothing_is_built_and_the_submitters_context_still_reaches_the_worker() -> None:
    assert tracing.ACTIVE is False
    flux = await Flux().start()
    try:
        assert flux.d.events.traces is None
        await flux.workflow(cpu=1)
        w = await flux.worker(cpu=1)
        execution = await flux.d.submit("job", trace=PARENT)
        assert flux.get(execution.execution_id).dispatch_trace == ""
        (event,) = [e for e in w.events() if isinstance(e, Scheduled)]
        message = worker_convert.scheduled_to_proto(event)
        assert message.trace.traceparent == PARENT  # a worker that traces continues the submitter's trace
        assert flux.store.executions[execution.execution_id].trace == PARENT
    finally:
        await flux.d.stop()


async def test_the_queued_span_covers_the_wait_with_its_verdicts_and_the_dispatch_travels(
    traced: Flux, exporter: InMemorySpanExporter
) -> None:
    flux = traced
    await flux.workflow(cpu=2)
    w = await flux.worker(cpu=2)
    first = await flux.d.submit("job", trace=PARENT)
    submitted_at = flux.clock.now
    second = await flux.d.submit("job", trace=PARENT)
    assert flux.state(second.execution_id) is State.CREATED  # w1's two cores are taken
    w.claim(first.execution_id)
    flux.clock.advance(5.0)
    await w.complete(first.execution_id)
    assert flux.state(second.execution_id) is State.SCHEDULED

    queued = {s.attributes["flux.execution.id"]: s for s in named(exporter, "flux.queued")}
    dispatched = {s.attributes["flux.execution.id"]: s for s in named(exporter, "flux.dispatch")}
    span = queued[second.execution_id]
    assert span.context.trace_id == TRACE_ID and span.parent.span_id == PARENT_ID
    assert (span.start_time, span.end_time) == (int(submitted_at * 1e9), int(flux.clock.now * 1e9))
    assert [e.name for e in span.events] == ["busy"]
    assert span.attributes["flux.queue.position"] == 0 and span.attributes["flux.attempt"] == 1
    dispatch = dispatched[second.execution_id]
    assert dispatch.kind is SpanKind.PRODUCER and dispatch.parent.span_id == PARENT_ID
    assert dispatch.attributes["flux.worker"] == "w1"
    # The worker gets the dispatch span's context: its own spans nest under it.
    (event,) = [
        e for e in w.events() if isinstance(e, Scheduled) and e.execution.execution_id == second.execution_id
    ]
    traceparent = worker_convert.scheduled_to_proto(event).trace.traceparent
    assert traceparent.startswith(f"00-{TRACE_ID:032x}-{dispatch.context.span_id:016x}-")
    # The one placed at once waited no time and saw no verdict.
    assert list(queued[first.execution_id].events) == []


async def test_a_submission_without_a_context_starts_its_own_trace(
    traced: Flux, exporter: InMemorySpanExporter
) -> None:
    await traced.workflow()
    execution = await traced.d.submit("job")
    (root,) = named(exporter, "flux.submit")
    assert root.kind is SpanKind.SERVER and root.parent is None
    assert tracing.split(execution.trace)[0].startswith(
        f"00-{root.context.trace_id:032x}-{root.context.span_id:016x}-"
    )


async def test_a_requeued_execution_is_a_new_attempt_linked_to_the_previous_dispatch(
    traced: Flux, exporter: InMemorySpanExporter
) -> None:
    flux = traced
    await flux.workflow(cpu=1)
    w1 = await flux.worker("w1", cpu=1)
    execution = await flux.d.submit("job", trace=PARENT)
    w1.claim(execution.execution_id)
    w1.disconnect()
    flux.expire(GRACE)  # lost: back in line for attempt 2, once stored
    await settled()
    requeued_at = flux.clock.now
    flux.clock.advance(3.0)
    await flux.worker("w2", cpu=1)
    first, second = sorted(named(exporter, "flux.dispatch"), key=lambda s: s.attributes["flux.generation"])
    assert (first.attributes["flux.attempt"], second.attributes["flux.attempt"]) == (1, 2)
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    again = max(named(exporter, "flux.queued"), key=lambda s: s.attributes["flux.generation"])
    assert [link.context.span_id for link in again.links] == [first.context.span_id]
    assert (again.start_time, again.end_time) == (int(requeued_at * 1e9), int(flux.clock.now * 1e9))


async def test_an_execution_cancelled_while_queued_leaves_no_waiting_record(traced: Flux) -> None:
    await traced.workflow(cpu=64)
    await traced.worker(cpu=1)
    execution = await traced.d.submit("job", trace=PARENT)
    assert traced.d.events.traces is not None
    assert execution.execution_id in traced.d.events.traces._waiting  # infeasible: it waits
    await traced.d.cancel(execution.execution_id)
    assert execution.execution_id not in traced.d.events.traces._waiting


async def test_each_verdict_change_while_waiting_is_an_event_on_the_queued_span(
    traced: Flux, exporter: InMemorySpanExporter
) -> None:
    flux = traced
    await flux.workflow(cpu=1)
    w1 = await flux.worker("w1", cpu=1)
    w1.claim((await flux.d.submit("job")).execution_id)  # takes w1's one core
    waiting = await flux.d.submit("job", trace=PARENT)
    await flux.tick()  # waiting past --starvation-after: w1 is nominated for it
    await flux.d.forget_worker("w1")
    await flux.tick()  # no worker at all now: nothing could run it
    await flux.worker("w2", cpu=2)
    (span,) = [
        s for s in named(exporter, "flux.queued") if s.attributes["flux.execution.id"] == waiting.execution_id
    ]
    assert [e.name for e in span.events] == ["busy", "nominated", "infeasible"]
    assert all(e.attributes["flux.summary"] for e in span.events)


def test_a_histogram_keeps_the_latest_sampled_trace_of_each_bucket_as_its_exemplar() -> None:
    h = Histogram((0.1, 1.0))
    unsampled = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-00f067aa0ba902b7-00"
    h.observe(0.05, PARENT)
    h.observe(0.06, unsampled)  # not sampled: no trace to link to
    h.observe(5.0, f"{PARENT} vendor=x")
    h.observe(0.5)
    assert {b: (e.trace_id, e.value) for b, e in h.exemplars.items()} == {
        0: (f"{TRACE_ID:032x}", 0.05),
        2: (f"{TRACE_ID:032x}", 5.0),
    }
    assert h.counts == [2, 1, 1]


def test_openmetrics_exposition_carries_the_exemplars_and_the_text_format_does_not() -> None:
    status = control_pb2.ClusterStatus(
        latencies=[
            control_pb2.LatencyHistogram(
                stage="dispatched",
                bounds=[0.1, 1.0],
                counts=[1, 0, 1],
                sum=2.05,
                count=2,
                exemplars=[
                    trace_pb2.BucketExemplar(
                        bucket=2, trace_id="ab" * 16, value=2.0, timestamp_ms=1_700_000_000_000
                    )
                ],
            )
        ]
    )
    openmetrics = metrics.render(status, openmetrics=True).decode()
    line = next(x for x in openmetrics.splitlines() if 'le="+Inf"' in x and "dispatched" in x)
    assert line.endswith(f'# {{trace_id="{"ab" * 16}"}} 2.0 1700000000.0'), line
    assert openmetrics.rstrip().endswith("# EOF")
    assert "trace_id" not in metrics.render(status).decode()
