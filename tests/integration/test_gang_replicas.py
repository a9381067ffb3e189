"""Gangs on two PostgreSQL replicas: placed by the replica that holds the members' streams,
whichever replica took the submission; cancelled through the other; a lost member retries it;
preempted whole, and preempting for every member at once."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux.client import FluxClient
from flux.security import Credentials
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

from .conftest import WORKFLOWS
from .test_gangs import GANGS

pytestmark = pytest.mark.integration

FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
CREATED = control_pb2.EXECUTION_STATE_CREATED
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


def _teams(replicas: Cluster, ml_cpu: int, web_cpu: int) -> tuple[str, str]:
    for team, cpu in (("ml", ml_cpu), ("web", web_cpu)):
        made = replicas.flux("tenant", "create", team, "--cpu", str(cpu), "--cohort", "research")
        assert made.returncode == 0, made.stderr
    return tuple(replicas.flux("token", "create", "--tenant", t).stdout.strip() for t in ("ml", "web"))  # type: ignore[return-value]


def _as(replicas: Cluster, token: str) -> FluxClient:
    return FluxClient(replicas.address, timeout=10, credentials=Credentials(token, replicas.ca))


def test_a_borrowing_gang_is_preempted_whole_on_replicas(replicas: Cluster) -> None:
    """ml's gang (2 x 2 cores against a quota of 2) runs on the other replica's workers; web's run,
    submitted to the first, takes its 2 cores back: both members stop, the gang waits whole."""
    other = replicas.replicas[0][1]
    replicas.start_worker("w1", "--cpus", "2", servers=[other])
    replicas.start_worker("w2", "--cpus", "2", servers=[other])
    ml, web = _teams(replicas, 2, 2)
    with _as(replicas, ml) as as_ml, _as(replicas, web) as as_web, replicas.client_for(other) as admin:
        gang = as_ml.run("gang_cores", 120).execution_id
        eventually(lambda: as_ml.get(gang).state == RUNNING, what="ml's gang on both workers")
        theirs = as_web.run("two_cores", 120).execution_id
        eventually(
            lambda: as_web.get(theirs).state == RUNNING, timeout=60, what="web's run on the reclaimed cores"
        )
        stopped = as_ml.get(gang)
        assert stopped.state == CREATED and not stopped.gang_members
        assert [a.reason for a in stopped.attempts] == ["preempted"]
        assert _members(replicas, gang) == 0  # no member holds it in the database either
        eventually(
            lambda: sorted(w.active_executions for w in admin.workers().workers if w.connected) == [0, 1],
            what="the gang's other member stopped too",
        )
        assert admin.status().counters.preempted["reclaim"] == 1
        as_web.cancel(theirs)
        as_ml.cancel(gang)


def test_a_pending_gang_preempts_on_every_member_worker_on_replicas(replicas: Cluster) -> None:
    """web's gang (2 x 2 cores, within its nominal 4), submitted to the first replica, has no room on
    the other replica's two full workers: ml's borrowed run on each is preempted, and it runs."""
    other = replicas.replicas[0][1]
    replicas.start_worker("w1", "--cpus", "2", servers=[other])
    replicas.start_worker("w2", "--cpus", "2", servers=[other])
    ml, web = _teams(replicas, 1, 4)
    with _as(replicas, ml) as as_ml, _as(replicas, web) as as_web, replicas.client_for(other) as admin:
        borrowed = [as_ml.run("two_cores", 120).execution_id for _ in range(2)]
        eventually(
            lambda: all(as_ml.get(i).state == RUNNING for i in borrowed), what="ml's runs on both workers"
        )
        gang = as_web.run("gang_cores", 120).execution_id
        eventually(lambda: as_web.get(gang).state == RUNNING, timeout=60, what="web's gang on both workers")
        assert sorted(m.worker for m in as_web.get(gang).gang_members) == ["w1", "w2"]
        for execution_id in borrowed:
            stopped = as_ml.get(execution_id)
            assert stopped.state == CREATED and [a.reason for a in stopped.attempts] == ["preempted"]
        assert admin.status().counters.preempted["reclaim"] == 2
        as_web.cancel(gang)
        for execution_id in borrowed:
            as_ml.cancel(execution_id)
