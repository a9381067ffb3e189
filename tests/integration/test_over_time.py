"""Work over time, through real servers and workers (gRPC and SSE, async and sync bodies): retries with
a stored backoff, attempt records and failure reasons, attempt timeouts that stop the body and free
its room only then, heartbeats, the pending deadline, per-run overrides and a manual retry."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from flux import Retry
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "over_time.py"
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
FAILED = control_pb2.EXECUTION_STATE_FAILED
RUNNING = control_pb2.EXECUTION_STATE_RUNNING


@pytest.fixture
def timed(cluster: Cluster) -> Cluster:
    cluster.register(EXAMPLE)
    cluster.start_worker("w1")
    return cluster


def test_errors_named_in_retry_on_are_retried_with_backoff_and_recorded(timed: Cluster) -> None:
    started = time.monotonic()
    final = timed.run("flaky", wait=True, timeout=60)
    assert final.state == COMPLETED, final
    # Waits of 0.3 s then 0.6 s (no jitter) before the second and third attempts.
    assert time.monotonic() - started >= 0.9
    assert json.loads(final.output_json) == {"attempt": 3, "resumed_from": {"reached": 2}}
    assert [(a.attempt, a.reason, a.error_type) for a in final.attempts] == [
        (1, "error", "ConnectionResetError"),
        (2, "error", "ConnectionResetError"),
        (3, "completed", ""),
    ]
    gap = final.attempts[1].started_at_ms - final.attempts[0].ended_at_ms
    assert gap >= 300, gap
    shown = timed.flux("execution", "show", final.execution_id)
    assert "attempt 1 of 3 failed on w1: ConnectionResetError('reset')" in shown.stdout


def test_errors_in_no_retry_on_fail_at_once_with_reason_error_and_a_manual_retry_tries_again(
    timed: Cluster,
) -> None:
    final = timed.run("picky", wait=True, timeout=60)
    assert (final.state, final.reason, final.attempt) == (FAILED, "error", 1)
    assert [a.reason for a in final.attempts] == ["error"]
    as_json = json.loads(timed.flux("execution", "show", final.execution_id, "--json").stdout)
    assert as_json["reason"] == "error" and as_json["attempts"][0]["error_type"] == "ValueError"
    retried = timed.flux("execution", "retry", final.execution_id)
    assert retried.returncode == 0, retried.stderr
    again = timed.client.wait(final.execution_id, timeout=60)
    assert (again.state, again.attempt) == (FAILED, 2)
    assert [a.attempt for a in again.attempts] == [1, 2]


def test_an_async_body_past_its_timeout_is_cancelled_retried_then_failed_with_reason_timeout(
    timed: Cluster,
) -> None:
    started = time.monotonic()
    final = timed.run("slow_async", wait=True, timeout=60)
    assert (final.state, final.reason, final.attempt) == (FAILED, "timeout", 2)
    assert [a.reason for a in final.attempts] == ["timeout", "timeout"]
    assert final.error.type == "AttemptTimeout"
    assert time.monotonic() - started < 30  # not the body's 60 s sleep
    # Both timeouts fired and the first was tried again: GET /metrics says so.
    text = httpx.get(f"{timed.gateway_url}/metrics", timeout=10).text
    assert 'flux_timeouts_total{kind="timeout"} 2.0' in text, text
    assert 'flux_retries_total{reason="timeout"} 1.0' in text
    assert 'flux_retries_total{reason="error"} 0.0' in text  # every reason, zero when none
    assert 'flux_timeouts_total{kind="pending_timeout"} 0.0' in text


def test_a_sync_body_past_its_timeout_is_killed_and_its_room_freed(timed: Cluster) -> None:
    final = timed.run("slow_sync", wait=True, timeout=60)
    assert (final.state, final.reason) == (FAILED, "timeout")
    # Its room came back: the worker runs the next execution at once.
    assert timed.run("flaky", wait=True, timeout=60).state == COMPLETED


def test_a_silent_attempt_is_stopped_with_reason_heartbeat_timeout(timed: Cluster) -> None:
    final = timed.run("silent", wait=True, timeout=60)
    assert (final.state, final.reason) == (FAILED, "heartbeat_timeout")


def test_heartbeats_in_a_tight_loop_keep_an_attempt_alive_and_are_recorded(timed: Cluster) -> None:
    final = timed.run("beating", 6, wait=True, timeout=60)  # three times its heartbeat timeout
    assert final.state == COMPLETED, final
    beats = json.loads(final.output_json)
    assert beats > 1000  # a tight loop: the worker coalesced them
    assert json.loads(final.heartbeat_json) > 0  # the latest details the server kept


def test_work_nothing_starts_within_its_pending_timeout_fails_with_explain_s_verdict(timed: Cluster) -> None:
    final = timed.run("unplaceable", wait=True, timeout=60)
    assert (final.state, final.reason) == (FAILED, "pending_timeout")
    assert "cores" in final.error.message or "cpu" in final.error.message, final.error.message


def test_a_run_overrides_the_attempt_timeout_and_retry_policy(timed: Cluster) -> None:
    # "beating" has no timeout of its own: this run's makes a 30 s body time out after 1 s, twice.
    execution = timed.client.run(
        "beating",
        30,
        attempt_timeout="1s",
        retry=Retry(max_attempts=2, initial_delay=0.1),
        wait=True,
        timeout=60,
    )
    assert (execution.state, execution.reason, execution.attempt) == (FAILED, "timeout", 2)
    # Each attempt was stopped for its timeout: none failed in the worker's hands before it (a sync
    # body's process once failed to get its job now and then, an error that was never the body's).
    assert [(a.reason, a.error_type) for a in execution.attempts] == [("timeout", "AttemptTimeout")] * 2
    cli = timed.flux("workflow", "run", "picky", "--retries", "1", "--wait", "--timeout", "60")
    assert cli.returncode != 0  # ValueError is never retried: the workflow's no_retry_on stays


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite", "postgres")
def test_a_retry_s_wait_survives_a_server_restart(cluster: Cluster) -> None:
    cluster.register(EXAMPLE)
    execution = cluster.client.run(
        "picky", retry=Retry(max_attempts=2, initial_delay="3s", jitter=False), wait=False
    )
    cluster.start_worker("w1")
    eventually(lambda: cluster.client.get(execution.execution_id).not_before_ms > 0, what="waiting to retry")
    not_before = cluster.client.get(execution.execution_id).not_before_ms / 1000
    cluster.kill_server()
    cluster.restart_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
    final = cluster.client.wait(execution.execution_id, timeout=60)
    assert (final.state, final.attempt) == (FAILED, 2)
    # The second attempt started no sooner than the stored time, restart or not.
    assert final.attempts[1].started_at_ms / 1000 >= not_before - 0.05


def test_explain_lists_the_attempts_of_an_execution_waiting_for_its_retry(timed: Cluster) -> None:
    execution = timed.client.run(
        "picky", retry=Retry(max_attempts=3, initial_delay="60s", jitter=False), wait=False
    )
    eventually(lambda: timed.client.get(execution.execution_id).not_before_ms > 0, what="waiting to retry")
    text = timed.flux("execution", "explain", execution.execution_id)
    assert text.returncode == 0, text.stderr
    assert "waiting " in text.stdout and " s to retry attempt 2" in text.stdout, text.stdout
    assert "attempt 1 of 3 failed on w1: ValueError('bad input: retrying will not help')" in text.stdout
    assert "next try at " in text.stdout and "(in 5" in text.stdout, text.stdout
    as_json = json.loads(timed.flux("execution", "explain", execution.execution_id, "--json").stdout)
    assert as_json["max_attempts"] == 3 and as_json["not_before_ms"] > 0
    assert [(a["attempt"], a["worker"], a["reason"], a["error_type"]) for a in as_json["attempts"]] == [
        (1, "w1", "error", "ValueError")
    ]
    timed.client.cancel(execution.execution_id)


def test_cancelling_an_execution_waiting_for_its_retry_ends_it_at_once(timed: Cluster) -> None:
    # The first attempt fails; the next waits 60 s. A cancel then must not wait that out.
    waiting = timed.client.run(
        "flaky",
        None,
        retry=Retry(max_attempts=3, initial_delay="60s", jitter=False, retry_on=["ConnectionError"]),
    )
    eventually(
        lambda: [a.reason for a in timed.client.get(waiting.execution_id).attempts] == ["error"],
        what="the first attempt recorded",
    )
    before = time.monotonic()
    timed.client.cancel(waiting.execution_id)
    final = timed.client.wait(waiting.execution_id, timeout=30)
    assert final.state == control_pb2.EXECUTION_STATE_CANCELLED
    assert time.monotonic() - before < 30  # not after the 60 s wait
    assert [a.attempt for a in final.attempts] == [1]  # the second attempt never started
