"""Gangs with real worker processes: rendezvous through ctx.gang, fail together, cancel together."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from flux.testing import Cluster, eventually
from flux.v1 import control_pb2
from tests.integration.test_tenants import _client

pytestmark = [pytest.mark.integration, pytest.mark.backends("sqlite", "postgres")]

GANGS = Path(__file__).with_name("gang_workflows.py")
CREATED = control_pb2.EXECUTION_STATE_CREATED
RUNNING = control_pb2.EXECUTION_STATE_RUNNING
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
CANCELLED = control_pb2.EXECUTION_STATE_CANCELLED


@pytest.fixture
def gangs(cluster: Cluster) -> Cluster:
    cluster.register(GANGS)
    return cluster


def _active(cluster: Cluster) -> dict[str, int]:
    listed = json.loads(cluster.flux("workers", "list", "--json").stdout)["workers"]
    return {w["name"]: w["active_executions"] for w in listed if w["connected"]}


def test_members_rendezvous_at_the_leaders_address(gangs: Cluster, tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        gangs.start_worker(name, "--advertise-address", "127.0.0.1")
    final = gangs.client.run("gang_rendezvous", {"folder": str(tmp_path)}, wait=True, timeout=90)
    assert final.state == COMPLETED, final.error
    listed = json.loads(gangs.flux("workers", "list", "--json").stdout)["workers"]
    assert {w["name"]: w["address"] for w in listed if w["connected"]} == dict.fromkeys("abc", "127.0.0.1")
    outputs = [json.loads(m.output_json) for m in final.gang_members]
    assert [o["rank"] for o in outputs] == [0, 1, 2]
    assert all(o["total"] == 111 for o in outputs)  # 1 + 10 + 100: every member reached the leader
    assert sorted(o["worker"] for o in outputs) == ["a", "b", "c"]  # each on its own worker
    assert json.loads(final.output_json) == outputs[0]
    assert final.gang_size == 3 and final.worker == final.gang_members[0].worker
    assert outputs[1]["members"] == [[m.rank, m.worker, "127.0.0.1"] for m in final.gang_members]
    declared = json.loads(gangs.flux("workflow", "show", "gang_rendezvous", "--json").stdout)
    assert declared["versions"][-1]["gang"] == {"size": 3, "same": None, "spread": None}
    assert "gang         2 members, same rack" in gangs.flux("workflow", "show", "gang_same_rack").stdout
    shown = json.loads(gangs.flux("execution", "show", final.execution_id, "--json").stdout)
    assert [m["worker"] for m in shown["gang_members"]] == [m.worker for m in final.gang_members]


def test_a_gang_waits_whole_until_there_is_room_for_every_member(gangs: Cluster, tmp_path: Path) -> None:
    gangs.start_worker("r1a", "--label", "rack=r1")
    gangs.start_worker("r2a", "--label", "rack=r2")
    waiting = gangs.client.run("gang_same_rack", {}, wait=False)
    explained = json.loads(gangs.flux("execution", "explain", waiting.execution_id, "--json").stdout)
    assert explained["summary"].startswith("gang of 2 same rack: racks r1 (1 worker can take a member)"), (
        explained,
        gangs.flux("execution", "show", waiting.execution_id).stdout,
    )
    assert explained["infeasible"] is True
    assert gangs.client.get(waiting.execution_id).state == CREATED
    assert _active(gangs) == {"r1a": 0, "r2a": 0}  # no partial gang holds anything
    gangs.start_worker("r2b", "--label", "rack=r2")
    final = gangs.client.wait(waiting.execution_id, timeout=60)
    assert final.state == COMPLETED
    assert sorted(m.worker for m in final.gang_members) == ["r2a", "r2b"]


def test_one_member_failing_retries_the_whole_gang(gangs: Cluster) -> None:
    gangs.start_worker("a")
    gangs.start_worker("b")
    final = gangs.client.run("gang_flaky", {}, wait=True, timeout=90)
    assert final.state == COMPLETED, final.error
    assert final.attempt == 2
    assert [json.loads(m.output_json) for m in final.gang_members] == [
        {"rank": 0, "attempt": 2}, {"rank": 1, "attempt": 2},
    ]  # fmt: skip
    eventually(lambda: _active(gangs) == {"a": 0, "b": 0}, what="every member's room freed")


def test_cancel_stops_every_member(gangs: Cluster, tmp_path: Path) -> None:
    gangs.start_worker("a")
    gangs.start_worker("b")
    running = gangs.client.run("gang_sleepy", {"folder": str(tmp_path)}, wait=False)
    eventually(lambda: gangs.client.get(running.execution_id).state == RUNNING, what="the gang to run")
    # No --advertise-address: the host the server saw each worker connect from (here loopback).
    assert [m.address for m in gangs.client.get(running.execution_id).gang_members] == ["127.0.0.1"] * 2
    cancelled = gangs.flux("workflow", "cancel", running.execution_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert gangs.client.get(running.execution_id).state == CANCELLED
    eventually(lambda: _active(gangs) == {"a": 0, "b": 0}, what="both members stopped")


def test_a_lost_member_ends_the_attempt_on_every_member(gangs: Cluster, tmp_path: Path) -> None:
    gangs.start_worker("a")
    doomed = gangs.start_worker("b")
    running = gangs.client.run("gang_sleepy", {"folder": str(tmp_path)}, wait=False)
    eventually(lambda: gangs.client.get(running.execution_id).state == RUNNING, what="the gang to run")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    # Past the grace period (2 s here) the attempt ends on both; the survivor waits for a partner.
    eventually(lambda: gangs.client.get(running.execution_id).attempt == 2, timeout=60, what="attempt 2")
    eventually(lambda: _active(gangs).get("a") == 0, what="the surviving member stopped")
    gangs.start_worker("c")
    final = gangs.client.wait(running.execution_id, timeout=60)
    assert final.state == COMPLETED and final.attempt == 2
    assert sorted(m.worker for m in final.gang_members) == ["a", "c"]


@pytest.mark.transports("grpc")
def test_preemption_stops_a_borrowing_gang_whole(gangs: Cluster) -> None:
    """ml's gang (2 members x 2 cores: 4 against a quota of 2) borrows web's share; web comes back
    for its 2 cores and the whole gang is preempted: both members stop and hand it back, it waits
    (not an attempt used), and web's run takes the room."""
    gangs.start_worker("w1", "--cpus", "2")
    gangs.start_worker("w2", "--cpus", "2")
    for team in ("ml", "web"):
        assert gangs.flux("tenant", "create", team, "--cpu", "2", "--cohort", "research").returncode == 0
    ml = gangs.flux("token", "create", "--tenant", "ml").stdout.strip()
    web = gangs.flux("token", "create", "--tenant", "web").stdout.strip()
    with _client(gangs, ml) as as_ml, _client(gangs, web) as as_web:
        gang = as_ml.run("gang_cores", 120).execution_id
        eventually(lambda: as_ml.get(gang).state == RUNNING, what="ml's gang running on both workers")
        theirs = as_web.run("two_cores", 120).execution_id
        eventually(lambda: as_web.get(theirs).state == RUNNING, what="web's run on the reclaimed cores")
        # Both members stopped: one worker runs web's, the other nothing (the gang needs both).
        eventually(lambda: sorted(_active(gangs).values()) == [0, 1], what="the gang's other member stopped")
        stopped = as_ml.get(gang)
        assert stopped.state == CREATED and not stopped.gang_members
        assert stopped.attempt == 1 and [a.reason for a in stopped.attempts] == ["preempted"]
        assert gangs.client.status().counters.preempted["reclaim"] == 1
        as_web.cancel(theirs)
        as_ml.cancel(gang)


@pytest.mark.transports("grpc")
def test_a_pending_gang_preempts_borrowed_work_on_every_member_worker(gangs: Cluster) -> None:
    """ml (a nominal core) borrows web's share: two runs of 2 cores fill both workers. web's gang
    of 2 x 2 cores fits its nominal 4, but no worker has a core free: it preempts ml's run on each
    of the two workers (room for both members at once), and runs on both."""
    gangs.start_worker("w1", "--cpus", "2")
    gangs.start_worker("w2", "--cpus", "2")
    assert gangs.flux("tenant", "create", "ml", "--cpu", "1", "--cohort", "research").returncode == 0
    assert gangs.flux("tenant", "create", "web", "--cpu", "4", "--cohort", "research").returncode == 0
    ml = gangs.flux("token", "create", "--tenant", "ml").stdout.strip()
    web = gangs.flux("token", "create", "--tenant", "web").stdout.strip()
    with _client(gangs, ml) as as_ml, _client(gangs, web) as as_web:
        borrowed = [as_ml.run("two_cores", 120).execution_id for _ in range(2)]
        eventually(lambda: _active(gangs) == {"w1": 1, "w2": 1}, what="ml's runs on both workers")
        gang = as_web.run("gang_cores", 120).execution_id
        eventually(lambda: as_web.get(gang).state == RUNNING, timeout=60, what="web's gang on both workers")
        assert sorted(m.worker for m in as_web.get(gang).gang_members) == ["w1", "w2"]
        for execution_id in borrowed:
            stopped = as_ml.get(execution_id)
            assert stopped.state == CREATED and [a.reason for a in stopped.attempts] == ["preempted"]
        assert gangs.client.status().counters.preempted["reclaim"] == 2
        as_web.cancel(gang)
        for execution_id in borrowed:
            as_ml.cancel(execution_id)


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
def test_a_runs_gang_size_over_http_and_the_cli(gangs: Cluster) -> None:
    import httpx

    from flux.security import Role

    for name in ("a", "b", "c"):
        gangs.start_worker(name)
    headers = {"Authorization": f"Bearer {gangs.token(Role.CLIENT)}"}
    answer = httpx.post(
        f"{gangs.gateway_url}/workflows/gang_same_rack/run",
        json={"input": {}, "gang_size": 0}, headers=headers, timeout=30,
    )  # fmt: skip
    assert answer.status_code == 422 and "gang_size" in answer.text
    ran = httpx.post(
        f"{gangs.gateway_url}/workflows/gang_echo/run",
        json={"input": "hi", "gang_size": 3, "wait": True, "timeout": 60}, headers=headers, timeout=90,
    )  # fmt: skip
    assert ran.status_code == 200, ran.text
    body = ran.json()
    assert body["state"] == "EXECUTION_STATE_COMPLETED" and body["gang_size"] == 3
    assert sorted(m["worker"] for m in body["gang_members"]) == ["a", "b", "c"]
    assert json.loads(body["output_json"]) == {"rank": 0, "input": "hi"}
    cli = gangs.flux("workflow", "run", "gang_same_rack", "{}", "--gang-size", "0")
    assert cli.returncode != 0 and "--gang-size" in cli.stderr


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
def test_a_running_gang_survives_a_server_restart(gangs: Cluster) -> None:
    """Killed while both members run: the restarted server holds the gang on both members' workers
    (their grace period to come back), and their results complete it as the same attempt."""
    gangs.start_worker("a")
    gangs.start_worker("b")
    running = gangs.client.run("gang_nap", 6.0).execution_id
    eventually(lambda: gangs.client.get(running).state == RUNNING, what="the gang to run")
    gangs.kill_server()
    gangs.restart_server()
    final = gangs.client.wait(running, timeout=60)
    assert final.state == COMPLETED and final.attempt == 1, final
    assert [json.loads(m.output_json) for m in final.gang_members] == [
        {"rank": 0, "attempt": 1}, {"rank": 1, "attempt": 1},
    ]  # fmt: skip
