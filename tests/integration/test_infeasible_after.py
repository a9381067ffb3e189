"""``flux start server --infeasible-after``, through a real server and workers: work no connected worker
and no pool could ever run ends FAILED (reason pending_timeout, explain's verdict as its error) once
it has been infeasible that long; work a declared pool could run, or that a worker that connects
meanwhile can run, is not failed."""

from __future__ import annotations

import json
import time

import pytest

from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

CREATED = control_pb2.EXECUTION_STATE_CREATED
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
FAILED = control_pb2.EXECUTION_STATE_FAILED
TICK = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")


def test_work_infeasible_that_long_fails_with_explain_s_verdict(cluster: Cluster) -> None:
    cluster.kill_server()
    cluster.restart_server(*TICK, "--infeasible-after", "1s")
    cluster.start_worker("w1")  # no GPU
    started = time.monotonic()
    final = cluster.run("needs_gpu", wait=True, timeout=60)
    assert (final.state, final.reason) == (FAILED, "pending_timeout"), final
    assert final.error.type == "Infeasible"
    assert "infeasible for 1s (--infeasible-after)" in final.error.message
    assert "GPU" in final.error.message, final.error.message  # explain's verdict on w1
    assert 1.0 <= time.monotonic() - started < 30
    # Work that fits is untouched.
    assert cluster.run("echo", "hi", wait=True, timeout=60).state == COMPLETED


def test_work_a_pool_or_a_new_worker_could_run_is_not_failed(cluster: Cluster) -> None:
    cluster.kill_server()
    cluster.restart_server(*TICK, "--infeasible-after", "3s")
    cluster.start_worker("w1")
    waiting = cluster.run("needs_gpu", wait=False)
    # A pool declared meanwhile could run it: no longer infeasible, so never failed.
    pools = cluster.workdir / "pools.json"
    pools.write_text(json.dumps({"pools": [{"name": "gpu", "resources": {"cpu": 1, "gpu": 2}, "max": 2}]}))
    applied = cluster.flux("pool", "apply", str(pools))
    assert applied.returncode == 0, applied.stderr
    time.sleep(5)
    assert cluster.client.get(waiting.execution_id).state == CREATED
    explained = cluster.flux("execution", "explain", waiting.execution_id)
    assert "pool gpu could run it" in explained.stdout, explained.stdout
    # A worker of the pool connects: it runs it.
    cluster.start_worker("g1", "--pool", "gpu", gpus="2")
    final = cluster.client.wait(waiting.execution_id, timeout=60)
    assert final.state == COMPLETED, final


def test_without_the_flag_infeasible_work_only_waits(cluster: Cluster) -> None:
    cluster.start_worker("w1")
    waiting = cluster.run("needs_gpu", wait=False)
    time.sleep(2)
    eventually(
        lambda: "infeasible" in cluster.flux("execution", "explain", waiting.execution_id).stdout,
        what="explain's infeasible verdict",
    )
    assert cluster.client.get(waiting.execution_id).state == CREATED
