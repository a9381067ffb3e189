"""Flow control on two PostgreSQL replicas: a key's concurrency, a named limit and a rate hold
cluster-wide.

The database is the witness for concurrency: a sampler reads the SCHEDULED and RUNNING rows of
the key while the work runs, on both replicas' workers, and never sees more than the limit at
once. The bodies are the witness for a rate: each returns when it started.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flux.store.postgres import PostgresStore
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "flow_control.py"
RATED = Path(__file__).with_name("replica_flow_workflows.py")
FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
HELD = "SELECT count(*) FROM executions WHERE state IN (2, 3) AND workflow_name = ANY(?) AND flow_keys LIKE ?"


@pytest.fixture
def replicas(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    """Two replicas with the flow-control example registered and two workers on each."""
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST)
        c.start_replica(*FAST)
        c.register(EXAMPLE)
        c.register(RATED)
        a, b = c.address, c.replicas[0][1]
        for name, server in (("wa1", a), ("wa2", a), ("wb1", b), ("wb2", b)):
            c.start_worker(name, "--capacity", "4", servers=[server])
        yield c
    finally:
        c.close()


class Sampler:
    """The most rows of a query's count seen at once, read every few milliseconds until stopped."""

    def __init__(self, read: Callable[[], int]):
        self.read = read
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, self.read())
            self._stop.wait(0.02)


def test_a_key_never_runs_twice_at_once_across_replicas(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]

    def held() -> int:
        return replicas.query(HELD, ["per_customer"], '%"k"%')[0][0]

    with replicas.client_for(a) as ca, replicas.client_for(b) as cb, Sampler(held) as sampler:
        ids = [
            (ca if i % 2 == 0 else cb)
            .run("per_customer", {"customer": "k", "seconds": 0.6}, wait=False)
            .execution_id
            for i in range(10)  # enough turns that both replicas' workers get some on a loaded box
        ]
        finals = replicas.wait_all(ids, timeout=90)
    assert all(f.state == COMPLETED for f in finals), finals
    assert sampler.most == 1, f"{sampler.most} runs of key k at once"
    # Both replicas' workers took their turns: the limit held across them, not by one doing it all.
    workers = {w for (w,) in replicas.query("SELECT DISTINCT worker FROM dispatches")}
    assert len(workers) >= 2, workers


def test_a_named_limit_created_through_one_replica_holds_work_submitted_through_the_other(
    replicas: Cluster,
) -> None:
    a, b = replicas.address, replicas.replicas[0][1]

    def held() -> int:
        return replicas.query(HELD, ["summarise", "translate"], "%")[0][0]

    with replicas.client_for(a) as ca, replicas.client_for(b) as cb:
        ca.limits.create("openai", concurrency=1)
        # B hears of it through the database's notice, not at its next start.
        eventually(lambda: [lim.name for lim in cb.limits.list()] == ["openai"], timeout=2, what="B knows it")
        with Sampler(held) as sampler:
            ids = [
                client.run(name, {"seconds": 1.0}, wait=False).execution_id
                for client, name in (
                    (cb, "summarise"),
                    (cb, "translate"),
                    (ca, "summarise"),
                    (cb, "translate"),
                )
            ]
            # B reports the use of the whole cluster, whichever replica's worker runs it.
            eventually(
                lambda: sum(k.in_use for k in cb.limits.show("openai").keys) == 1,
                timeout=30,
                what="one run in use, shown through B",
            )
            finals = replicas.wait_all(ids, timeout=90)
    assert all(f.state == COMPLETED for f in finals), finals
    assert sampler.most == 1, f"{sampler.most} runs under limit openai at once"


def busiest_second(starts: list[float]) -> int:
    """The most starts in any window of one second."""
    starts = sorted(starts)
    return max(sum(1 for t in starts[i:] if t < s + 1.0) for i, s in enumerate(starts))


def test_a_rate_holds_across_replicas(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    with replicas.client_for(a) as ca, replicas.client_for(b) as cb:
        ids = [
            (ca if i % 2 == 0 else cb).run("two_a_second", None, wait=False).execution_id for i in range(20)
        ]
        finals = replicas.wait_all(ids, timeout=120)
    assert all(f.state == COMPLETED for f in finals), finals
    starts = [float(f.output_json) for f in finals]
    # 2/s with a burst of 1: at most 2 + 1 in any second (each replica's own bucket alone lets 4 through).
    assert busiest_second(starts) <= 3, sorted(round(t - min(starts), 2) for t in starts)
    # Both replicas' workers started some: the rate held across them, not by one doing it all.
    workers = {w for (w,) in replicas.query("SELECT DISTINCT worker FROM dispatches")}
    assert len(workers) >= 2, workers


def test_a_rate_bucket_full_again_is_pruned_and_the_rate_still_holds(replicas: Cluster, pg_url: str) -> None:
    """A bucket's row says when it is full again; past then prune_buckets deletes it (a missing
    row is a full bucket), and the rate holds as before on the next runs."""
    with replicas.client_for(replicas.address) as client:
        first = [client.run("two_a_second", None, wait=False).execution_id for _ in range(3)]
        assert all(f.state == COMPLETED for f in replicas.wait_all(first, timeout=60))
    ((budget, tokens, updated_at, full_at),) = replicas.query(
        "SELECT budget, tokens, updated_at, full_at FROM flow_buckets WHERE budget LIKE ?", "%two_a_second%"
    )
    # 2/s, burst 1: full again half a second per missing token after the last refill.
    assert full_at == pytest.approx(updated_at + (1.0 - tokens) / 2.0)

    async def prune() -> int:
        store = PostgresStore(pg_url, "pruner")
        await store.open()
        try:
            return await store.prune_buckets()
        finally:
            await store.close()

    eventually(lambda: time.time() > full_at + 0.1, what="the bucket to be full again")
    assert asyncio.run(prune()) == 1
    assert replicas.query("SELECT budget FROM flow_buckets WHERE budget = ?", budget) == []
    with replicas.client_for(replicas.replicas[0][1]) as client:
        again = [client.run("two_a_second", None, wait=False).execution_id for _ in range(6)]
        finals = replicas.wait_all(again, timeout=60)
    starts = [float(f.output_json) for f in finals]
    assert busiest_second(starts) <= 3, sorted(round(t - min(starts), 2) for t in starts)
