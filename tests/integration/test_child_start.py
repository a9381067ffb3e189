"""A sync body's heartbeat window counts from the body's start in its process, not from its claim:
a child process that takes longer than the window to start (here on purpose: its workflow module
sleeps 4 s at import, child_start_workflows.py) and then beats is not failed; a body that never
beats once started still is, and the details of an earlier try's last heartbeat are kept. Real
server, worker and child processes, over both worker transports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux.testing import Cluster
from flux.v1 import control_pb2

pytestmark = pytest.mark.integration

WORKFLOWS = Path(__file__).with_name("child_start_workflows.py")
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
FAILED = control_pb2.EXECUTION_STATE_FAILED
START_DELAY = 4.0  # twice the 2 s heartbeat window: the body starts after it has run out


@pytest.fixture
def slow_start(cluster: Cluster) -> Cluster:
    cluster.register(WORKFLOWS)
    cluster.start_worker("w1", env={"FLUX_TEST_CHILD_START_DELAY": str(START_DELAY)})
    return cluster


def test_a_body_whose_process_starts_after_its_window_ran_out_and_then_beats_succeeds(
    slow_start: Cluster,
) -> None:
    final = slow_start.run("late_beating", 3.0, wait=True, timeout=90)
    assert (final.state, final.reason) == (COMPLETED, ""), final
    beats = json.loads(final.output_json)
    assert beats > 10
    assert json.loads(final.heartbeat_json) > 0  # the body's details; the start's beat had none


@pytest.mark.backends("sqlite", "postgres")
def test_a_body_silent_once_started_is_still_stopped_and_the_last_details_are_kept(
    slow_start: Cluster,
) -> None:
    final = slow_start.run("silent_once_started", wait=True, timeout=90)
    assert (final.state, final.reason, final.attempt) == (FAILED, "heartbeat_timeout", 2), final
    # The second try's start beat (no details) left the first try's details in place.
    assert json.loads(final.heartbeat_json) == {"reached": 1}


def test_a_body_whose_process_is_killed_fails_with_its_exit_and_the_worker_goes_on(cluster: Cluster) -> None:
    cluster.register(WORKFLOWS)
    cluster.start_worker("w1")
    final = cluster.run("dies_in_its_child", wait=True, timeout=60)
    assert final.state == FAILED, final
    assert final.error.type == "ChildProcessError" and "exit -9" in final.error.message, final.error
    # The worker is unharmed and its room came back: the next body in a child runs to its end.
    assert cluster.run("late_beating", 0.2, wait=True, timeout=60).state == COMPLETED
