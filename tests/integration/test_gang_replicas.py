"""Gangs on two PostgreSQL replicas: placed by the replica that holds the members' streams,
whichever replica took the submission; cancelled through the other; a lost member retries it."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

from .conftest import WORKFLOWS
from .test_gangs import GANGS

pytestmark = pytest.mark.integration

FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
RUNNING = control_pb2.EXECUTION_STATE_RUNNING
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
CANCELLED = control_pb2.EXECUTION_STATE_CANCELLED


@pytest.fixture
def replicas(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST)
        c.start_replica(*FAST)
        c.register(WORKFLOWS)
        c.register(GANGS)
        yield c
    finally:
        c.close()


def _members(replicas: Cluster, execution_id: str) -> int:
    """How many workers the database says hold it now (its dispatch's members)."""
    (row,) = replicas.query("SELECT gang FROM executions WHERE execution_id = ?", execution_id)
    return len(json.loads(row[0])["members"]) if row[0] else 0


def test_a_gang_submitted_to_one_replica_runs_on_the_others_workers(
    replicas: Cluster, tmp_path: Path
) -> None:
    other = replicas.replicas[0][1]
    for name in ("a", "b", "c"):
        replicas.start_worker(name, "--advertise-address", "127.0.0.1", servers=[other])
    final = replicas.client.run("gang_rendezvous", {"folder": str(tmp_path)}, wait=True, timeout=90)
    assert final.state == COMPLETED, final.error
    outputs = [json.loads(m.output_json) for m in final.gang_members]
    assert [o["total"] for o in outputs] == [111, 111, 111]
    assert sorted(o["worker"] for o in outputs) == ["a", "b", "c"]
    # The database holds one result, and each dispatch of it once (one generation, one claim).
    (dispatches,) = replicas.query(
        "SELECT count(*) FROM dispatches WHERE execution_id = ?", final.execution_id
    )
    assert dispatches == (1,)


def test_cancel_through_the_other_replica_stops_every_member(replicas: Cluster, tmp_path: Path) -> None:
    other = replicas.replicas[0][1]
    replicas.start_worker("a", servers=[other])
    replicas.start_worker("b", servers=[other])
    running = replicas.client.run("gang_sleepy", {"folder": str(tmp_path)}, wait=False)
    eventually(lambda: replicas.client.get(running.execution_id).state == RUNNING, what="the gang to run")
    assert replicas.client.cancel(running.execution_id).state == CANCELLED
    with replicas.client_for(other) as client:
        eventually(
            lambda: all(w.active_executions == 0 for w in client.workers().workers if w.connected),
            what="both members stopped on the replica holding them",
        )


def test_a_lost_member_retries_the_gang_on_replicas(replicas: Cluster, tmp_path: Path) -> None:
    other = replicas.replicas[0][1]
    replicas.start_worker("a", servers=[other])
    doomed = replicas.start_worker("b", servers=[other])
    running = replicas.client.run("gang_sleepy", {"folder": str(tmp_path)}, wait=False)
    eventually(lambda: replicas.client.get(running.execution_id).state == RUNNING, what="the gang to run")
    assert _members(replicas, running.execution_id) == 2
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    eventually(lambda: replicas.client.get(running.execution_id).attempt == 2, timeout=60, what="attempt 2")
    replicas.start_worker("c", servers=[other])
    final = replicas.client.wait(running.execution_id, timeout=60)
    assert final.state == COMPLETED and final.attempt == 2
    assert sorted(m.worker for m in final.gang_members) == ["a", "c"]
