"""Pipelining workers (``flux start worker --prefetch N``) with a real server and real worker
processes, over gRPC and through the SSE gateway.

Every body notes, on its own clock, when it started and ended (tests/integration/prefetch_workflows.py)
and appends its execution id to a log file as it starts: how many ran at once on a worker, and in
what order they started, is read from what the bodies themselves saw.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = pytest.mark.timeout(180)

WORKFLOWS = Path(__file__).with_name("prefetch_workflows.py")
COMPLETED = control_pb2.ExecutionState.Value("EXECUTION_STATE_COMPLETED")
CANCELLED = control_pb2.ExecutionState.Value("EXECUTION_STATE_CANCELLED")
RUNNING = control_pb2.ExecutionState.Value("EXECUTION_STATE_RUNNING")


def most_at_once(outputs: list[dict]) -> int:
    """The most bodies that ran at the same moment, from their own start and end times."""
    edges = sorted([(o["started"], 1) for o in outputs] + [(o["ended"], -1) for o in outputs])
    running = most = 0
    for _, step in edges:  # at equal times an end (-1) sorts before a start
        running += step
        most = max(most, running)
    return most


def started(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def queued_at(cluster: Cluster, execution_id: str, summary: str) -> None:
    eventually(
        lambda: cluster.client.explain(execution_id).summary == summary,
        what=lambda: f"{summary!r}; explain says {cluster.client.explain(execution_id).summary!r}",
    )


@pytest.mark.backends("sqlite", "postgres")
def test_queued_executions_start_in_order_and_never_beyond_the_room(cluster: Cluster, tmp_path: Path):
    cluster.register(WORKFLOWS)
    cluster.start_worker("w1", "--cpus", "2", "--capacity", "2", "--prefetch", "2")
    log = tmp_path / "started.log"
    ids = [
        cluster.client.run("one_core", {"seconds": 0.3, "tag": n, "log": str(log)}, wait=False).execution_id
        for n in range(10)
    ]
    done = cluster.wait_all(ids)
    assert [e.state for e in done] == [COMPLETED] * 10
    outputs = [json.loads(e.output_json) for e in done]
    assert most_at_once(outputs) == 2  # its room, busy throughout, and never more
    assert started(log) == ids  # one worker, one priority: first come, first started
    assert cluster.client.status().counters.queued_dispatches >= 2


@pytest.mark.transports("grpc")
def test_a_queued_execution_cancelled_never_runs(cluster: Cluster, tmp_path: Path):
    cluster.register(WORKFLOWS)
    cluster.start_worker("w1", "--cpus", "1", "--capacity", "1", "--prefetch", "2")
    log = tmp_path / "started.log"
    ids = [
        cluster.client.run("one_core", {"seconds": 1.0, "log": str(log)}, wait=False).execution_id
        for _ in range(3)
    ]
    queued_at(cluster, ids[1], "queued at worker w1 (1st)")
    queued_at(cluster, ids[2], "queued at worker w1 (2nd)")
    assert cluster.client.cancel(ids[1]).state == CANCELLED
    done = cluster.wait_all(ids)
    assert [e.state for e in done] == [COMPLETED, CANCELLED, COMPLETED]
    assert started(log) == [ids[0], ids[2]]


def test_a_killed_workers_queue_goes_back_at_once_and_runs_elsewhere(tmp_path: Path, transport: str):
    # A grace far longer than the test: what it held running stays RUNNING, its queue does not wait.
    cluster = Cluster(tmp_path, transport)
    try:
        cluster.start_server("--ack-deadline", "30", "--grace-period", "120", "--safety-tick", "1")
        cluster.register(WORKFLOWS)
        w1 = cluster.start_worker("w1", "--cpus", "1", "--capacity", "1", "--prefetch", "3")
        log = tmp_path / "started.log"
        ids = [
            cluster.client.run(
                "one_core", {"seconds": 5.0 if n == 0 else 0.1, "log": str(log)}, wait=False
            ).execution_id
            for n in range(4)
        ]
        queued_at(cluster, ids[3], "queued at worker w1 (3rd)")
        eventually(lambda: cluster.client.get(ids[0]).state == RUNNING, what="the first claimed on w1")
        # Its body logs its start just after the claim (later still over SSE): wait for that line.
        eventually(lambda: started(log) != [], what="the first body's start in the log")
        assert started(log) == ids[:1]
        w1.kill()
        w1.wait(30)
        cluster.start_worker("w2", "--cpus", "1", "--capacity", "1")
        done = cluster.wait_all(ids[1:], timeout=60)
        assert [e.state for e in done] == [COMPLETED] * 3
        assert {json.loads(e.output_json)["worker"] for e in done} == {"w2"}
        assert cluster.client.get(ids[0]).state == RUNNING  # still within w1's grace
    finally:
        cluster.close()


CREATED = control_pb2.ExecutionState.Value("EXECUTION_STATE_CREATED")


def test_a_queue_holds_one_once_its_workers_bodies_run_long(cluster: Cluster, tmp_path: Path):
    # --prefetch 4 is the most; the server keeps a queue to about 50 ms of the worker's recent bodies.
    cluster.register(WORKFLOWS)
    cluster.start_worker("w1", "--cpus", "1", "--capacity", "1", "--prefetch", "4")
    log = tmp_path / "started.log"

    def run(seconds: float) -> str:
        return cluster.client.run("one_core", {"seconds": seconds, "log": str(log)}, wait=False).execution_id

    learned = [run(0.3) for _ in range(2)]  # two bodies of 0.3 s: the server has seen how long they run
    assert [e.state for e in cluster.wait_all(learned)] == [COMPLETED] * 2
    ids = [run(3.0 if n == 0 else 0.1) for n in range(5)]
    queued_at(cluster, ids[1], "queued at worker w1 (1st)")
    # While the first body runs (3 s), one waits in w1's queue and the rest in the server's line.
    assert [cluster.client.get(i).state for i in ids[2:]] == [CREATED] * 3
    assert not cluster.client.explain(ids[2]).summary.startswith("queued at worker")
    assert [e.state for e in cluster.wait_all(ids)] == [COMPLETED] * 5
    assert started(log) == [*learned, *ids]


def test_what_waits_behind_a_long_body_moves_to_a_worker_with_free_room(cluster: Cluster, tmp_path: Path):
    cluster.register(WORKFLOWS)
    cluster.start_worker("busy", "--cpus", "1", "--capacity", "1", "--prefetch", "4")
    log, gate = tmp_path / "started.log", tmp_path / "gate"
    long = cluster.client.run("one_core", {"until": str(gate), "log": str(log)}, wait=False).execution_id
    short = [cluster.client.run("one_core", {"log": str(log)}, wait=False).execution_id for _ in range(3)]
    queued_at(cluster, short[2], "queued at worker busy (3rd)")
    cluster.start_worker("free", "--cpus", "1", "--capacity", "1")
    # busy's one core is held until the test opens the gate: what waits in its queue moves to free.
    done = cluster.wait_all(short, timeout=60)
    assert [e.state for e in done] == [COMPLETED] * 3
    assert {json.loads(e.output_json)["worker"] for e in done} == {"free"}
    assert cluster.client.get(long).state == RUNNING
    gate.touch()
    [ended] = cluster.wait_all([long], timeout=60)
    assert ended.state == COMPLETED and json.loads(ended.output_json)["worker"] == "busy"
    assert sorted(started(log)) == sorted([long, *short])  # each body started once: none ran twice


@pytest.mark.transports("grpc")
def test_a_higher_priority_arrival_waits_behind_at_most_the_queue(cluster: Cluster, tmp_path: Path):
    cluster.register(WORKFLOWS)
    cluster.start_worker("w1", "--cpus", "1", "--capacity", "1", "--prefetch", "1")
    log = tmp_path / "started.log"
    low = [
        cluster.client.run("one_core", {"seconds": 0.5, "log": str(log)}, wait=False).execution_id
        for _ in range(4)
    ]
    queued_at(cluster, low[1], "queued at worker w1 (1st)")
    urgent = cluster.client.run("one_core_urgent", {"log": str(log)}, wait=False).execution_id
    cluster.wait_all([*low, urgent])
    # Behind the running body and the one queued (N = 1), ahead of everything still pending.
    assert started(log) == [low[0], low[1], urgent, low[2], low[3]]


@pytest.mark.transports("grpc")
def test_two_postgresql_replicas_each_queue_at_their_own_workers(tmp_path: Path, pg_url: str):
    cluster = Cluster(tmp_path, db=pg_url)
    fast = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
    try:
        cluster.start_server(*fast)
        cluster.start_replica(*fast)
        cluster.register(WORKFLOWS)
        a, b = cluster.address, cluster.replicas[0][1]
        for name, server in (("wa", a), ("wb", b)):
            cluster.start_worker(name, "--cpus", "2", "--capacity", "2", "--prefetch", "2", servers=[server])
        with cluster.client_for(a) as ca, cluster.client_for(b) as cb:
            ids = [
                (ca if n % 2 else cb).run("one_core", {"seconds": 0.2}, wait=False).execution_id
                for n in range(24)
            ]
            done = [ca.wait(i, 60) for i in ids]
            assert [e.state for e in done] == [COMPLETED] * len(ids)
            outputs = [json.loads(e.output_json) for e in done]
            for worker in ("wa", "wb"):
                mine = [o for o in outputs if o["worker"] == worker]
                assert mine and most_at_once(mine) <= 2
            queued = ca.status().counters.queued_dispatches + cb.status().counters.queued_dispatches
            assert queued > 0
    finally:
        cluster.close()
