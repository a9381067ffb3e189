"""Batches on two PostgreSQL replicas: a batch made through one replica and joined, read, waited on
and cancelled through the other; its ``max_concurrent`` holds cluster-wide.

The database is the witness, as in test_replica_flow.py: a sampler reads the batch's SCHEDULED
and RUNNING rows while it runs on both replicas' workers and never sees more than the max; the
bodies' own start and end times agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc
from tests.integration.test_arrays import most_at_once, shards
from tests.integration.test_replica_flow import Sampler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

EXAMPLE = Path(__file__).parents[2] / "examples" / "batches.py"
FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
CANCELLED = control_pb2.EXECUTION_STATE_CANCELLED
HELD = "SELECT count(*) FROM executions WHERE state IN (2, 3) AND batch_id = ?"


@pytest.fixture
def replicas(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    """Two replicas with the batches example registered and two workers on each."""
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST)
        c.start_replica(*FAST)
        c.register(EXAMPLE)
        a, b = c.address, c.replicas[0][1]
        for name, server in (("wa1", a), ("wa2", a), ("wb1", b), ("wb2", b)):
            c.start_worker(name, "--capacity", "4", servers=[server])
        yield c
    finally:
        c.close()


def test_a_batch_never_runs_more_than_its_max_across_replicas(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    with replicas.client_for(a) as ca, replicas.client_for(b) as cb:
        runs = ca.map("shard", shards(6, 0.5), max_concurrent=2)
        # More members through the other replica, in the same batch.
        stub = control_pb2_grpc.ControlServiceStub(replicas.channel(Role.CLIENT, b))
        joined = stub.RunWorkflows(
            control_pb2.RunWorkflowsRequest(
                workflow_name="shard",
                input_json=[json.dumps(s) for s in shards(6, 0.5)],
                batch_id=runs.batch_id,
            )
        )
        assert joined.batch_id == runs.batch_id
        with Sampler(lambda: replicas.query(HELD, runs.batch_id)[0][0]) as sampler:
            final = cb.batches.wait(runs.batch_id, timeout=180)
        assert (final.total, final.completed) == (12, 12), final
        ids = [r.execution_id for r in runs] + [e.execution_id for e in joined.executions]
        finals = replicas.wait_all(ids, timeout=60)
    assert all(f.state == COMPLETED for f in finals), finals
    assert sampler.most <= 2, f"{sampler.most} members of the batch held at once"
    assert most_at_once(f.output_json for f in finals) <= 2
    # Both replicas' workers took members: the max held across them, not by one doing it all.
    workers = {
        w
        for (w,) in replicas.query("SELECT DISTINCT worker FROM executions WHERE batch_id = ?", runs.batch_id)
    }
    assert len(workers) >= 2, workers


def test_a_batch_is_cancelled_through_the_other_replica(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    with replicas.client_for(a) as ca, replicas.client_for(b) as cb:
        runs = ca.map("shard", shards(5, 30.0), max_concurrent=2)
        eventually(lambda: cb.batches.get(runs.batch_id).running == 2, timeout=60)
        cancelled = cb.batches.cancel(runs.batch_id)
        assert (cancelled.cancelled, cancelled.finished) == (5, True), cancelled
        finals = replicas.wait_all([r.execution_id for r in runs], timeout=60)
    assert all(f.state == CANCELLED for f in finals), finals
