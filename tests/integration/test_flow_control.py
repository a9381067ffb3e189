"""Flow control through a real server and worker processes (gRPC and SSE workers, SQLite): at most
``max`` runs of one key at a time while other keys run beside them, a run's key= in place of the
input's, and a rate limit's starts spread by its rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux.testing import Cluster
from flux.v1 import control_pb2

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "flow_control.py"
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED


@pytest.fixture
def flowing(cluster: Cluster) -> Cluster:
    cluster.register(EXAMPLE)
    cluster.start_worker("w1", "--capacity", "8")
    return cluster


def _overlap(a: dict, b: dict) -> bool:
    return a["started"] < b["ended"] and b["started"] < a["ended"]


def test_one_run_per_customer_at_a_time_while_other_customers_run_beside(flowing: Cluster) -> None:
    client = flowing.client
    # The first holds acme's slot for 3 s: long enough that the third still waits when the CLI's
    # explain (a process of its own, slow on a loaded machine) asks about it.
    acme = [client.run("per_customer", {"customer": "acme", "seconds": s}) for s in (3.0, 0.4, 0.4)]
    beta = client.run("per_customer", {"customer": "beta", "seconds": 0.4})
    assert dict(acme[0].flow_keys) == {"concurrency": "acme"}
    explained = flowing.flux("execution", "explain", acme[2].execution_id)
    assert "key customer=acme at 1/1 running" in explained.stdout, explained.stdout
    finals = flowing.wait_all([e.execution_id for e in [*acme, beta]], timeout=60)
    assert all(f.state == COMPLETED for f in finals), finals
    runs = [json.loads(f.output_json) for f in finals]
    acme_runs, beta_run = runs[:3], runs[3]
    assert not any(_overlap(a, b) for i, a in enumerate(acme_runs) for b in acme_runs[i + 1 :])
    assert _overlap(acme_runs[0], beta_run)  # another key is never held back


def test_a_run_key_replaces_the_inputs(flowing: Cluster) -> None:
    client = flowing.client
    first = client.run("per_customer", {"customer": "acme", "seconds": 0.4}, key="k1")
    second = client.run("per_customer", {"customer": "acme", "seconds": 0.4}, key="k2")
    finals = flowing.wait_all([first.execution_id, second.execution_id], timeout=60)
    a, b = (json.loads(f.output_json) for f in finals)
    assert _overlap(a, b)
    cli = flowing.flux("workflow", "run", "per_customer", '{"customer": "x", "seconds": 0}', "--key", "k3")
    assert cli.returncode == 0, cli.stderr
    execution = client.wait(cli.stdout.strip(), timeout=60)
    assert dict(execution.flow_keys) == {"concurrency": "k3"}


def test_rate_limited_starts_are_spread_by_the_rate(flowing: Cluster) -> None:
    ids = [flowing.client.run("paced").execution_id for _ in range(6)]
    assert "next token in" in flowing.client.explain(ids[-1]).summary  # the last waits about 1 s
    finals = flowing.wait_all(ids, timeout=60)
    starts = sorted(json.loads(f.output_json) for f in finals)
    # 5/s with a burst of 1: six starts take at least 5 x 0.2 s (less a little clock slack).
    assert starts[-1] - starts[0] >= 0.9, starts
