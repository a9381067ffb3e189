"""Work over time on replicas: the pending timeout and a retry's wait belong to the database's row,
not to the replica that took the submission (real servers, workers and PostgreSQL)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

from .test_replicas import FAST, rows

pytestmark = pytest.mark.integration

WORKFLOWS = Path(__file__).parent / "replica_timing_workflows.py"
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
FAILED = control_pb2.EXECUTION_STATE_FAILED


@pytest.fixture
def replicas(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST)
        c.start_replica(*FAST)
        c.register(WORKFLOWS)
        yield c
    finally:
        c.close()


def kill_first(replicas: Cluster) -> None:
    replicas.server.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    replicas.server.wait(timeout=10)  # type: ignore[union-attr]


def test_a_pending_timeout_fires_on_the_replica_left_when_the_one_that_took_it_dies(
    replicas: Cluster,
) -> None:
    b = replicas.replicas[0][1]
    submitted = time.time()
    execution_id = replicas.run("stranded", wait=False).execution_id  # through the first replica
    kill_first(replicas)
    with replicas.client_for(b) as cb:
        final = cb.wait(execution_id, 30)
        assert (final.state, final.reason, final.error.type) == (FAILED, "pending_timeout", "PendingTimeout")
        # Counted from the submission, not from when the second replica learned of it. Both ends are
        # the row's own milliseconds: a float taken before the call can be a fraction of a
        # millisecond after the truncated created_at_ms, so it cannot be the lower bound.
        assert final.updated_at_ms - final.created_at_ms >= 4000
        assert final.updated_at_ms / 1000 - submitted < 8
        assert cb.status().counters.timeouts["pending_timeout"] == 1
    assert rows(
        replicas.db, f"SELECT state, reason FROM executions WHERE execution_id = '{execution_id}'"
    ) == [(5, "pending_timeout")]


def test_a_pending_timeout_both_replicas_decide_ends_each_execution_once(replicas: Cluster) -> None:
    b = replicas.replicas[0][1]
    with replicas.client_for(b) as cb:
        ids = [(replicas.client if i % 2 else cb).run("stranded", wait=False).execution_id for i in range(6)]
        finals = [cb.wait(i, 30) for i in ids]
        assert {(f.state, f.reason) for f in finals} == {(FAILED, "pending_timeout")}
        # Each replica counts the ones its own update ended: together, each once.
        fired = [c.status().counters.timeouts["pending_timeout"] for c in (replicas.client, cb)]
    assert sum(fired) == len(ids), fired


def test_a_retrys_wait_survives_the_replica_that_held_it_and_is_waited_out_once(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    replicas.start_worker("w1", servers=[a, b])  # prefers the first replica, falls back to the second
    execution_id = replicas.run("once_flaky", wait=False).execution_id

    def waiting() -> bool:
        found = rows(
            replicas.db, f"SELECT state, not_before FROM executions WHERE execution_id = '{execution_id}'"
        )
        return found[0][0] == 1 and found[0][1] > 0

    eventually(waiting, timeout=30, interval=0.1, what="the first attempt failed and its retry waits")
    kill_first(replicas)
    with replicas.client_for(b) as cb:
        final = cb.wait(execution_id, 60)
    assert final.state == COMPLETED, final
    first, second = final.attempts
    assert (first.attempt, first.reason, second.attempt, second.reason) == (1, "error", 2, "completed")
    assert second.started_at_ms - first.ended_at_ms >= 4000  # not before its not-before time
    dispatched = rows(
        replicas.db, f"SELECT generation FROM dispatches WHERE execution_id = '{execution_id}' ORDER BY 1"
    )
    assert dispatched == [(1,), (2,)]  # tried again once, not twice
