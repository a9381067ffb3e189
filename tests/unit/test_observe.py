"""Lifecycle events, structured logs, and the status snapshot behind GetStatus and /metrics.

The dispatcher runs with the in-memory store, fake sessions and a hand-driven
clock (tests/unit/harness.py), so counts and latencies are exact.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flux.dispatcher.state.lifecycle import LATENCY_BOUNDS, Histogram, Requeue
from flux.dispatcher.transitions.batches import BatchAsk
from flux.domain.execution import ExecutionError, State
from flux.observe import logs
from flux.observe.status import BUSY, INFEASIBLE, NO_WORKER, StatusBoard, reason_of
from flux.security import Tokens, check
from flux.server import convert
from flux.v1 import control_pb2
from gateway.observe.metrics import render
from tests.unit.harness import ACK, GRACE

pytestmark = pytest.mark.timeout(10)


@pytest.fixture
def lifecycle_log() -> Iterator[io.StringIO]:
    """The flux.lifecycle lines, as JSON, while the test runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("flux.lifecycle")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def events(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


# ---- lifecycle counters and latencies -----------------------------------------------------------


async def test_each_lifecycle_event_is_counted_timed_and_logged_once(flux, lifecycle_log) -> None:
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=4)
    execution_id = await flux.run(input_json='{"password": "hunter2"}')
    flux.clock.advance(0.003)
    w.claim(execution_id)
    await w.complete(execution_id, output_json='"secret output"')

    counters, latency = flux.d.events.counters, flux.d.events.latency
    assert (counters.submitted, counters.dispatched, counters.claimed, counters.completed) == (1, 1, 1, 1)
    # Dispatched in the same step as the submission; claimed 3 ms later, and "started" with it.
    assert latency["dispatched"].counts[0] == 1 and latency["dispatched"].sum == 0
    assert latency["claimed"].count == latency["started"].count == 1
    assert latency["claimed"].counts[LATENCY_BOUNDS.index(0.005)] == 1
    assert latency["claimed"].sum == pytest.approx(0.003)

    lines = [e for e in events(lifecycle_log) if e.get("execution_id") == execution_id]
    assert [e["event"] for e in lines] == ["submitted", "dispatched", "claimed", "completed"]
    dispatched = lines[1]
    assert (dispatched["workflow"], dispatched["worker"], dispatched["generation"]) == ("job", "w1", 1)
    assert {"ts", "level", "logger", "msg"} <= set(dispatched) and dispatched["logger"] == "flux.lifecycle"
    # Never inputs or outputs.
    assert "hunter2" not in lifecycle_log.getvalue() and "secret output" not in lifecycle_log.getvalue()


async def test_failures_cancels_and_requeues_are_counted_by_reason(flux, lifecycle_log) -> None:
    await flux.workflow(cpu=1, max_attempts=1)
    w = await flux.worker(cpu=4)
    failing, released, expiring, cancelled = [await flux.run() for _ in range(4)]
    w.claim(failing)
    await w.complete(failing, None, ExecutionError("ValueError", "private detail"))
    w.claim(released)
    w.release(released)  # back to CREATED, re-dispatched at once
    await flux.d.cancel(cancelled)
    w.events()
    flux.expire(ACK)  # `expiring` and the re-dispatched `released` were never claimed

    c = flux.d.events.counters
    assert (c.failed, c.cancelled) == (1, 1)
    assert c.requeued[Requeue.RELEASED] == 1
    assert c.ack_deadline_expiries == c.requeued[Requeue.ACK_DEADLINE] == 2
    logged = events(lifecycle_log)
    [failed] = [e for e in logged if e["event"] == "failed"]
    assert failed["error_type"] == "ValueError" and "private detail" not in lifecycle_log.getvalue()
    assert [e["reason"] for e in logged if e["event"] == "requeued"] == ["released"]
    assert {e["execution_id"] for e in logged if e["event"] == "expired"} == {released, expiring}
    assert [e["execution_id"] for e in logged if e["event"] == "cancelled"] == [cancelled]


async def test_a_lost_worker_requeues_its_work_or_fails_it_when_out_of_attempts(flux, lifecycle_log) -> None:
    await flux.workflow("once", cpu=1, max_attempts=1)
    await flux.workflow("twice", cpu=1, max_attempts=2)
    w = await flux.worker(cpu=4)
    once, twice = await flux.run("once"), await flux.run("twice")
    w.claim(once)
    w.claim(twice)
    w.disconnect()
    flux.expire(GRACE)
    c = flux.d.events.counters
    assert c.requeued[Requeue.WORKER_LOST] == 1 and c.failed == 1
    logged = {e["execution_id"]: e for e in events(lifecycle_log) if e["event"] in ("requeued", "failed")}
    assert logged[twice]["reason"] == "worker_lost" and logged[twice]["attempt"] == 2
    assert logged[once]["event"] == "failed" and logged[once]["worker"] == "w1"


async def test_a_stream_reopened_by_the_same_registration_is_a_reconnect(flux, lifecycle_log) -> None:
    w = await flux.worker()
    w.disconnect()
    w.connect()
    w.connect()  # takes over its own live stream: also a reconnect
    c = flux.d.events.counters
    assert (c.stream_connects, c.stream_reconnects) == (3, 2)
    # A new process under the same name registers anew: a new worker, not a reconnect.
    w.disconnect()
    flux.expire(GRACE)
    await flux.worker()
    assert (c.stream_connects, c.stream_reconnects) == (4, 2)
    kinds = [
        (e["event"], e.get("reconnect")) for e in events(lifecycle_log) if e["event"].startswith("worker")
    ]
    assert kinds[:4] == [
        ("worker_connected", False),
        ("worker_disconnected", None),
        ("worker_connected", True),
        ("worker_connected", True),
    ]


def test_histogram_buckets_follow_prometheus_le() -> None:
    h = Histogram((0.1, 1.0))
    for value in (0.1, 0.5, 1.0, 7.0, -1.0):
        h.observe(value)
    assert h.counts == [2, 2, 1]  # a bound belongs to its own bucket; negatives count as 0
    assert (h.count, h.sum) == (5, pytest.approx(8.6))


# ---- the status snapshot --------------------------------------------------------------------------


async def test_pending_reasons_agree_with_explain_for_every_pending_execution(flux) -> None:
    await flux.workflow("small", cpu=2)
    await flux.workflow("gpu", gpu=1)
    await flux.workflow("labelled", affinity={"role": "training"})
    board = StatusBoard(flux.d)

    no_worker = await flux.run("small")
    status = await board.snapshot()
    assert status.pending_by_reason == {BUSY: 0, INFEASIBLE: 0, NO_WORKER: 1}
    assert (await flux.d.why(no_worker)).summary == status.pending[0].summary

    w = await flux.worker(cpu=2)
    w.claim(no_worker)  # now it holds the only worker's two cores
    pending = [
        await flux.run("small"),
        await flux.run("small"),
        await flux.run("gpu"),
        await flux.run("labelled"),
    ]
    status = await board.snapshot()
    rows = {row.oldest_workflow: row for row in status.pending}
    for execution_id in pending:
        why = await flux.d.why(execution_id)
        row = rows[why.execution.workflow.name]
        assert why.explanation is not None
        assert row.summary == why.summary
        assert row.reason == reason_of(len(why.explanation.verdicts), why.explanation.infeasible)
    assert (rows["small"].reason, rows["gpu"].reason, rows["labelled"].reason) == (
        BUSY,
        INFEASIBLE,
        INFEASIBLE,
    )
    assert status.pending_by_reason == {BUSY: 2, INFEASIBLE: 2, NO_WORKER: 0}
    assert rows["small"].count == 2 and rows["small"].oldest_execution_id == pending[0]
    assert status.executions[State.CREATED] == 4 and status.executions[State.RUNNING] == 1


async def test_the_open_aggregate_is_reused_for_max_age_and_taken_once_at_a_time(flux) -> None:
    await flux.workflow(cpu=2)
    ticks = [100.0]
    board = StatusBoard(flux.d, monotonic=lambda: ticks[0])
    await flux.run()
    first = await board.aggregate(max_age=1.0)
    assert first.pending_by_reason[NO_WORKER] == 1 and not first.workers and not first.pending
    await flux.worker(cpu=1)  # too small for it, ever
    await flux.run()
    assert await board.aggregate(max_age=1.0) is first  # a caller polling in a loop costs nothing
    ticks[0] += 1.5
    again = await board.aggregate(max_age=1.0)
    assert again.pending_by_reason == {BUSY: 0, INFEASIBLE: 2, NO_WORKER: 0}
    assert again.counters.submitted == 2
    # Concurrent callers share one snapshot.
    ticks[0] += 1.5
    both = await asyncio.gather(board.aggregate(max_age=1.0), board.aggregate(max_age=1.0))
    assert both[0] is both[1] and both[0] is not again
    # GetStatus's snapshot is always fresh.
    await flux.worker("w2", cpu=2)  # takes one; the other could run there once it is done
    assert (await board.snapshot()).pending_by_reason == {BUSY: 1, INFEASIBLE: 0, NO_WORKER: 0}


async def test_fleet_totals_and_metrics_text(flux) -> None:
    await flux.workflow("gpu", cpu=2, gpu=1)
    await flux.workflow("never", affinity={"role": "training"})
    w = await flux.worker("w1", cpu=8, gpus=2)
    await flux.worker("w2", cpu=4, connect=False)
    running = await flux.run("gpu")
    w.claim(running)
    await flux.run("never")
    status = convert.status_to_proto(await StatusBoard(flux.d).snapshot())

    fleet = status.fleet
    assert dict(fleet.connected_by_transport) == {"grpc": 1, "sse": 0} and fleet.disconnected == 1
    assert (fleet.reserved.cpu, fleet.reserved.gpus, fleet.allocatable.cpu, fleet.allocatable.gpus) == (
        2,
        1,
        8,
        2,
    )
    assert [w.name for w in status.workers] == ["w1", "w2"]
    assert [(p.reason, p.count, dict(p.affinity)) for p in status.pending] == [
        ("infeasible", 1, {"role": "training"})
    ]

    families = {f.name: f for f in text_string_to_metric_families(render(status).decode())}

    def value(name: str, **labels: str) -> float:
        [sample] = [s for f in families.values() for s in f.samples if s.name == name and s.labels == labels]
        return sample.value

    assert value("flux_workers_connected", transport="grpc") == 1
    assert value("flux_pending_executions", reason="infeasible") == 1
    assert value("flux_pending_executions", reason="busy") == 0
    assert value("flux_executions", state="running") == 1
    assert value("flux_placements_total") == 1 and value("flux_claims_total") == 1
    assert value("flux_reservations", resource="cpu_cores") == 2
    assert value("flux_reservations", resource="gpus") == 1
    assert value("flux_allocatable", resource="memory_bytes") == 16 * 1024**3
    assert value("flux_requeues_total", reason="worker_lost") == 0
    assert value("flux_dispatch_latency_seconds_count", stage="started") == 1
    assert value("flux_dispatch_latency_seconds_bucket", stage="dispatched", le="+Inf") == 1
    assert families["flux_placements"].type == "counter"
    assert families["flux_dispatch_latency_seconds"].type == "histogram"
    # Bounded labels only: no worker, workflow or execution name anywhere.
    text = render(status).decode()
    for name in ("w1", "w2", running, "training"):
        assert name not in text


async def test_get_metrics_is_the_aggregate_part_of_get_status(flux) -> None:
    await flux.workflow(cpu=1)
    await flux.worker()
    await flux.run()
    board = StatusBoard(flux.d)
    full = convert.status_to_proto(await board.snapshot(detail=True))
    aggregate = convert.status_to_proto(await board.snapshot(detail=False))
    assert full.workers and not aggregate.workers and not aggregate.pending
    for message in (full, aggregate):
        message.ClearField("workers")
        message.ClearField("pending")
    assert full == aggregate


def test_get_metrics_is_open_and_get_status_needs_the_api_token() -> None:
    tokens = Tokens(worker="w" * 16, api="a" * 16)
    assert check(tokens, "/flux.v1.ControlService/GetMetrics", "") is None
    refused = check(tokens, "/flux.v1.ControlService/GetStatus", "")
    assert refused is not None and refused[0].name == "UNAUTHENTICATED"
    assert check(tokens, "/flux.v1.ControlService/GetStatus", "a" * 16) is None


# ---- log formats --------------------------------------------------------------------------------


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "flux.lifecycle", logging.INFO, __file__, 1, "execution %s", ("dispatched",), None
    )
    record.__dict__.update(extra)
    return record


def test_json_lines_carry_event_and_fields_as_members() -> None:
    record = _record(
        event="dispatched", fields={"execution_id": "e1", "worker": "w1", "generation": 3, "msg": "x"}
    )
    entry = json.loads(logs.JsonFormatter().format(record))
    assert entry["ts"].endswith("Z") and entry["level"] == "INFO" and entry["logger"] == "flux.lifecycle"
    assert (entry["msg"], entry["event"], entry["execution_id"], entry["generation"]) == (
        "execution dispatched", "dispatched", "e1", 3,
    )  # fmt: skip
    assert entry["field_msg"] == "x"  # a field never overwrites a member every line has


def test_json_keeps_exceptions_on_one_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord("flux", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line and "RuntimeError: boom" in json.loads(line)["exc_info"]


def test_text_lines_append_fields_as_key_value_pairs() -> None:
    record = _record(fields={"execution_id": "e1", "worker": None, "reconnect": True, "reason": "a b"})
    line = logs.TextFormatter().format(record)
    assert line.endswith(
        'INFO flux.lifecycle: execution dispatched execution_id=e1 worker=- reconnect=true reason="a b"'
    )


def test_text_lines_read_as_the_stock_formatter_writes_them() -> None:
    # The text formatter builds its line itself, the date and time cached per second: same text.
    stock, ours = logging.Formatter(logs.TEXT_FORMAT), logs.TextFormatter()
    try:
        raise ValueError("late")
    except ValueError:
        failed = logging.LogRecord("flux.x", logging.ERROR, __file__, 1, "oops %d", (7,), sys.exc_info())
    records = [logging.LogRecord("flux.x", logging.WARNING, __file__, 1, "hi %s", ("you",), None), failed]
    for created in (1_700_000_000.0, 1_700_000_000.999, 1_700_000_001.5, 1_699_999_999.25):
        record = logging.LogRecord("flux.y", logging.INFO, __file__, 1, "at %s", (created,), None)
        record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
        records.append(record)
    for record in records:
        assert ours.format(record) == stock.format(record)
    assert ours.formatTime(records[0], "%H") == stock.formatTime(records[0], "%H")


def test_json_timestamps_are_utc_with_milliseconds_across_seconds() -> None:
    # The date and time part is cached per second: a new second, or an earlier one, is formatted anew.
    stamps = [
        logs._timestamp(t) for t in (1_700_000_000.5, 1_700_000_000.999, 1_700_000_001.0, 1_699_999_999.25)
    ]
    assert stamps == [
        "2023-11-14T22:13:20.500Z",
        "2023-11-14T22:13:20.999Z",
        "2023-11-14T22:13:21.000Z",
        "2023-11-14T22:13:19.250Z",
    ]


def test_configure_replaces_handlers_and_refuses_unknown_formats() -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        logs.configure("DEBUG", "json", stream)
        logging.getLogger("flux.test").debug("hello %s", "there")
        assert json.loads(stream.getvalue())["msg"] == "hello there"
        assert len(root.handlers) == 1
        with pytest.raises(ValueError, match="text, json"):
            logs.formatter("xml")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.fixture
def configured() -> Iterator[None]:
    """Lets a test call logs.configure; the logging set-up is put back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    fmt = logs._format
    try:
        yield
    finally:
        logs._stop_writer()
        root.handlers[:] = handlers
        root.setLevel(level)
        logs._format, logs._writer = fmt, None  # event lines take the record path, as without configure


LIFECYCLE_FIELDS = {
    "execution_id": "e1",
    "workflow": "hello",
    "worker": None,
    "generation": 3,
    "reason": "a b",
}


@pytest.mark.parametrize("fmt", logs.FORMATS)
def test_an_event_line_is_what_its_record_would_format_to(fmt: str) -> None:
    # The line written without a record, at the same instant, is the record's line to the character.
    formatter = logs.formatter(fmt)
    for created in (1_700_000_000.0, 1_700_000_000.999, 1_700_000_001.5, 1_699_999_999.25):
        record = logging.LogRecord(
            "flux.lifecycle", logging.INFO, __file__, 1, "execution requeued", (), None
        )
        record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
        record.event, record.fields = "requeued", LIFECYCLE_FIELDS
        line = formatter.event_line(
            created, "flux.lifecycle", "execution requeued", "requeued", LIFECYCLE_FIELDS
        )
        assert line == formatter.format(record)


@pytest.mark.parametrize("fmt", logs.FORMATS)
def test_event_lines_are_written_by_the_writer_thread_without_records(configured: None, fmt: str) -> None:
    stream = io.StringIO()
    logs.configure("INFO", fmt, stream)
    made = []
    real = logging.Logger.makeRecord
    logger = logging.getLogger("flux.lifecycle")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logging.Logger, "makeRecord", lambda *a, **k: made.append(a) or real(*a, **k))
        logs.event(logger, "requeued", "execution requeued", LIFECYCLE_FIELDS)
        logs.flush()
    assert made == []  # no record: the configured handler is the only place the line could go
    (line,) = stream.getvalue().splitlines()
    if fmt == "json":
        entry = json.loads(line)
        assert (entry["logger"], entry["event"], entry["reason"], entry["worker"]) == (
            "flux.lifecycle", "requeued", "a b", None,
        )  # fmt: skip
    else:
        assert line.endswith(
            'INFO flux.lifecycle: execution requeued execution_id=e1 workflow=hello worker=- generation=3 reason="a b"'
        )


def test_event_lines_reach_every_other_listener_as_records(configured: None) -> None:
    stream, elsewhere = io.StringIO(), io.StringIO()
    logs.configure("INFO", "json", stream)
    logger = logging.getLogger("flux.lifecycle")
    listener = logging.StreamHandler(elsewhere)  # an application's own handler, or a test's caplog
    listener.setFormatter(logs.JsonFormatter())
    logger.addHandler(listener)
    try:
        logs.event(logger, "claimed", "execution claimed", {"execution_id": "e1"})
    finally:
        logger.removeHandler(listener)
    assert json.loads(elsewhere.getvalue())["event"] == "claimed"
    assert json.loads(stream.getvalue())["execution_id"] == "e1"  # still on the configured stream too

    # A filter on the configured handler is honoured: the record path runs it, and it drops the line.
    logs._writer.handler.addFilter(lambda record: record.fields.get("execution_id") != "secret")  # type: ignore[union-attr]
    logs.event(logger, "claimed", "execution claimed", {"execution_id": "secret"})
    logs.event(logger, "claimed", "execution claimed", {"execution_id": "e2"})
    assert [json.loads(line)["execution_id"] for line in stream.getvalue().splitlines()] == ["e1", "e2"]


def test_an_event_line_that_cannot_be_written_is_reported_as_logging_reports_it(configured: None) -> None:
    class Full(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

    logs.configure("INFO", "text", Full())
    reported: list[logging.LogRecord] = []
    logs._writer.handler.handleError = reported.append  # type: ignore[union-attr, method-assign]
    logs.event(logging.getLogger("flux.lifecycle"), "claimed", "execution claimed", {"execution_id": "e1"})
    logs.flush()
    (record,) = reported  # reported, never raised into the dispatcher
    assert (record.event, record.fields, record.getMessage()) == (
        "claimed",
        {"execution_id": "e1"},
        "execution claimed",
    )


def test_a_line_that_cannot_be_formatted_is_reported_and_the_next_is_written(configured: None) -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no text")

    stream = io.StringIO()
    logs.configure("INFO", "text", stream)
    reported: list[logging.LogRecord] = []
    logs._writer.handler.handleError = reported.append  # type: ignore[union-attr, method-assign]
    logger = logging.getLogger("flux.lifecycle")
    logs.event(logger, "claimed", "execution claimed", {"execution_id": "e1"})
    logs.event(logger, "claimed", "execution claimed", {"execution_id": Unprintable()})
    logs.event(logger, "claimed", "execution claimed", {"execution_id": "e2"})
    logs.flush()
    assert [r.getMessage() for r in reported] == ["execution claimed"]
    written = [line.rsplit(" ", 1)[-1] for line in stream.getvalue().splitlines()]
    assert written == ["execution_id=e1", "execution_id=e2"]  # the lines around it, and the writer goes on


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_its_event_lines_through_records(configured: None) -> None:
    # The child has no writer thread: a line queued for one would never be written.
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as stream:
        logs.configure("INFO", "json", stream)
        child = os.fork()
        if child == 0:  # the child: one line, then out without running the parent's atexit
            try:
                logs.event(
                    logging.getLogger("flux.lifecycle"),
                    "claimed",
                    "execution claimed",
                    {"execution_id": "child"},
                )
                os._exit(0 if logs._writer is None else 1)
            finally:
                os._exit(2)
        _, status = os.waitpid(child, 0)
        logs._stop_writer()
    with os.fdopen(read_end) as lines:
        written = [json.loads(line)["execution_id"] for line in lines.read().splitlines()]
    assert os.waitstatus_to_exitcode(status) == 0
    assert written == ["child"]


def test_event_lines_keep_their_order_and_are_all_written_when_the_process_exits() -> None:
    # The writer thread is a daemon: what it has not written yet is written at exit (atexit).
    script = """
import logging, sys
from flux.observe import logs
logs.configure("INFO", "json", sys.stdout)
log = logging.getLogger("flux.lifecycle")
for n in range(5000):
    logs.event(log, "submitted", "execution submitted", {"execution_id": f"e{n}"})
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ids = [json.loads(line)["execution_id"] for line in done.stdout.splitlines()]
    assert ids == [f"e{n}" for n in range(5000)]


def test_empty_status_converts() -> None:
    message = control_pb2.ClusterStatus()
    assert b"flux_workers_connected" in render(message)


async def test_a_bulk_submission_is_one_submitted_line_for_the_call_and_counts_each(
    flux, lifecycle_log
) -> None:
    await flux.workflow(cpu=1)
    executions = await flux.d.submit_many("job", ['{"password": "hunter2"}'] * 3, batch=BatchAsk(new=True))
    assert flux.d.events.counters.submitted == 3
    [line] = [e for e in events(lifecycle_log) if e["event"] == "submitted"]
    assert line["msg"] == "executions submitted"
    assert (line["executions"], line["workflow"]) == (3, "job")
    assert (line["first"], line["last"]) == (executions[0].execution_id, executions[-1].execution_id)
    assert line["batch_id"] == executions[0].batch_id and line["batch_id"].startswith("b-")
    assert "hunter2" not in lifecycle_log.getvalue()
    # One input alone is logged as one run is.
    [single] = await flux.d.submit_many("job", ["1"])
    assert events(lifecycle_log)[-1]["execution_id"] == single.execution_id
    # A batch's cancel: each counted, one line for those it cancelled.
    await flux.d.cancel_batch(line["batch_id"])
    assert flux.d.events.counters.cancelled == 3
    [cancelled] = [e for e in events(lifecycle_log) if e["event"] == "cancelled"]
    assert (cancelled["msg"], cancelled["executions"], cancelled["batch_id"]) == (
        "executions cancelled",
        3,
        line["batch_id"],
    )
    assert {cancelled["first"], cancelled["last"]} <= {e.execution_id for e in executions}
