"""``gpu_memory`` end to end: a worker process with simulated GPUs, the real server, explain and the listings."""

from __future__ import annotations

import json

import pytest

from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = [pytest.mark.integration]

COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
RUNNING = control_pb2.EXECUTION_STATE_RUNNING
CANCELLED = control_pb2.EXECUTION_STATE_CANCELLED


def test_gpu_memory_picks_devices_with_enough_free_vram_and_explains_the_rest(cluster: Cluster) -> None:
    # Three 80 GiB devices with 10, 40 and 30 GiB free: two can take a 20 GiB request.
    cluster.start_worker("gpu-box", gpus="1:10Gi,1:40Gi,1:30Gi")
    client = cluster.client
    holders = [cluster.run("needs_vram", 600.0, wait=False).execution_id for _ in range(2)]
    eventually(lambda: all(client.get(e).state == RUNNING for e in holders), what="both to run")
    # Best fit: the 30 GiB device first, then the 40 GiB one; the 10 GiB device never.
    assert sorted(client.get(e).gpu_indices[0] for e in holders) == [1, 2]

    waiting = cluster.run("needs_vram", 0.0, wait=False).execution_id
    eventually(lambda: "GPU with 20.0 GiB free" in client.explain(waiting).summary, what="explain")
    why = client.explain(waiting)
    assert why.summary == "0/1 workers can run it: 1 has no GPU with 20.0 GiB free"
    assert not why.infeasible
    [rejection] = why.workers[0].rejections
    assert (rejection.reason, rejection.permanent) == ("insufficient_gpu_memory", False)

    never = cluster.run("needs_vram_100", wait=False).execution_id
    eventually(lambda: client.explain(never).infeasible, what="the 100 GiB request to be infeasible")
    assert client.explain(never).summary == "0/1 workers can run it: 1 has no GPU with 100.0 GiB total"
    text = cluster.flux("execution", "explain", never)
    assert text.returncode == 0 and text.stdout.splitlines()[0].endswith("has no GPU with 100.0 GiB total")

    # Freeing one device lets the waiting execution take it.
    client.cancel(holders[0])
    freed = client.get(holders[0]).gpu_indices[0]
    done = client.wait(waiting, timeout=60)
    assert done.state == COMPLETED and json.loads(done.output_json)["gpus"] == [freed]
    client.cancel(holders[1])

    listed = json.loads(cluster.flux("workflow", "show", "needs_vram", "--json").stdout)
    assert listed["versions"][-1]["requests"]["gpu_memory"] == 20 * 1024**3
