"""Schedules on two PostgreSQL replicas: both tickers claim every due tick, the runs' primary key
lets one record it, so each tick runs once; a killed replica's ticks go on from the other, and a
schedule made through one replica fires from either."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux.testing import Cluster, eventually

pytestmark = pytest.mark.integration

WORKFLOWS = Path(__file__).with_name("workflows.py")
FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
RUNS = "SELECT tick, execution_id, result FROM schedule_runs WHERE schedule = ? ORDER BY tick"


@pytest.fixture
def replicas(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST)
        c.start_replica(*FAST)
        c.register(WORKFLOWS)
        c.start_worker("wa", "--capacity", "8", servers=[c.address])
        c.start_worker("wb", "--capacity", "8", servers=[c.replicas[0][1]])
        yield c
    finally:
        c.close()


def _fired(c: Cluster, name: str) -> list[float]:
    return [float(t) for t, _, r in c.query(RUNS, name) if r == "fired"]


def _contiguous(ticks: list[float]) -> bool:
    return ticks == [float(t) for t in range(int(ticks[0]), int(ticks[-1]) + 1)]


def test_two_replicas_fire_each_tick_once_and_a_kill_leaves_no_gap(replicas: Cluster) -> None:
    c = replicas
    with c.client_for(c.replicas[0][1]) as through_b:
        for name in ("r1", "r2", "r3"):
            through_b.schedules.create(name, workflow="echo", every="1s", overlap="allow", catch_up="all")
    eventually(
        lambda: all(len(_fired(c, n)) >= 5 for n in ("r1", "r2", "r3")), timeout=60, what="5 ticks each"
    )
    c.kill_server()  # the first replica: the second goes on alone
    killed = time.time()
    eventually(
        lambda: all(max(_fired(c, n)) >= killed + 4 for n in ("r1", "r2", "r3")),
        timeout=60,
        what="ticks after the kill",
    )
    for name in ("r1", "r2", "r3"):
        ticks = _fired(c, name)
        assert _contiguous(ticks), (name, ticks)
        ids = [
            row[0]
            for row in c.query(
                "SELECT execution_id FROM executions WHERE execution_id LIKE ?", f"sch-{name}-%"
            )
        ]
        assert len(ids) == len(set(ids)) == len(ticks), (name, len(ids), len(ticks))
    # Both tickers claimed every tick while both ran; no tick has two runs.
    doubled = c.query(
        "SELECT tenant, schedule, tick, count(*) FROM schedule_runs GROUP BY 1, 2, 3 HAVING count(*) > 1"
    )
    assert doubled == []


def test_a_restarted_replica_catches_up_and_pause_reaches_the_other(replicas: Cluster) -> None:
    c = replicas
    c.client.schedules.create("beat", workflow="echo", every="1s", overlap="allow", catch_up="all")
    eventually(lambda: len(_fired(c, "beat")) >= 3, timeout=60, what="three ticks")
    c.kill_server()
    c.replicas[0][0].kill()
    c.replicas[0][0].wait(timeout=10)
    time.sleep(8)  # nobody ticks: every tick of this gap is missed, and catch-up 'all' runs them all
    c.restart_server(*FAST)
    restarted = time.time()
    eventually(lambda: max(_fired(c, "beat")) >= restarted, timeout=60, what="a tick after the restart")
    assert _contiguous(_fired(c, "beat"))
    c.restart_replica(0, *FAST)
    with c.client_for(c.replicas[0][1]) as through_b:
        through_b.schedules.pause("beat")
    paused = time.time()
    time.sleep(4)  # the first replica reads the pause within its reload period
    assert max(_fired(c, "beat")) <= paused + 2.5
