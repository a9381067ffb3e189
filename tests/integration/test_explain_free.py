"""What ``explain``, ``flux workers list`` and ``flux status`` say about a waiting execution, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import resources_pb2, worker_pb2, worker_pb2_grpc

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def test_explain_summary_counts_every_reason_of_every_worker(cluster: Cluster) -> None:
    # Getting started's example on two 2-core workers without GPUs, torch or transformers.
    registered = cluster.flux("workflow", "register", str(ROOT / "examples" / "resource_workflows.py"))
    assert registered.returncode == 0, registered.stderr
    for name in ("small-1", "small-2"):
        cluster.start_worker(name, "--cpus", "2", "--memory", "16Gi", "--gpus", "0", packages={})
    execution_id = cluster.flux("workflow", "run", "model_training_workflow").stdout.strip()
    text = cluster.flux("execution", "explain", execution_id)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == (
        "0/2 workers can run it: 2 have only 2 cores, 2 have no GPUs, 2 lack torch>=2.0.0 and transformers"
    )
    assert lines[1] == "infeasible: no connected worker could ever run it; priority 0; next in line"
    body = json.loads(cluster.flux("execution", "explain", execution_id, "--json").stdout)
    assert body["summary"] == lines[0] and body["infeasible"] is True
    for verdict in body["workers"]:
        assert [r["reason"] for r in verdict["rejections"]] == [
            "insufficient_cpu", "insufficient_gpu", "missing_package",
        ]  # fmt: skip
        assert verdict["rejections"][2]["wanted"] == "torch>=2.0.0, transformers"
    # flux status's pending row carries the same summary.
    status = json.loads(cluster.flux("status", "--json").stdout)
    assert [p["summary"] for p in status["pending"] if p["oldest_workflow"] == "model_training_workflow"] == [
        lines[0]
    ]


@pytest.mark.transports("grpc")  # a raw gRPC worker plays the loaded host
def test_a_loaded_host_reads_the_same_in_explain_workers_list_and_status(cluster: Cluster) -> None:
    # A 2-core host whose other processes use both cores: nothing reserved, nothing free.
    stub = worker_pb2_grpc.WorkerServiceStub(cluster.channel(Role.WORKER))
    loaded = resources_pb2.WorkerResources(
        cpu_total=2, cpu_available=0, memory_total=8 << 30, memory_available=3 << 30,
        disk_total=100 << 30, disk_free=40 << 30,
    )  # fmt: skip
    token = stub.Register(worker_pb2.RegisterRequest(name="loaded", resources=loaded)).session_token
    stream = stub.Connect(worker_pb2.ConnectRequest(name="loaded", session_token=token))
    try:
        assert next(stream).WhichOneof("event") == "connected"
        execution_id = cluster.flux("workflow", "run", "needs_cpu", "0").stdout.strip()
        eventually(lambda: cluster.client.explain(execution_id).summary.startswith("0/1"))
        explained = cluster.flux("execution", "explain", execution_id).stdout.splitlines()
        assert explained[0] == "0/1 workers can run it: 1 has 0 of 2 cores free"
        assert explained[1] == "waiting for capacity; priority 0; next in line"

        table = cluster.flux("workers", "list").stdout.splitlines()
        assert table[0].split()[:8] == ["NAME", "STATE", "TRANSPORT", "LOAD", "CPU", "MEMORY", "GPUS", "DISK"]
        [row] = [line for line in table if line.startswith("loaded ")]
        assert "free 0/2 (reserved 0)" in row
        assert "free 3.0/8.0 GiB (reserved 0 B)" in row and "free 40.0/100.0 GiB (reserved 0 B)" in row
        [listed] = json.loads(cluster.flux("workers", "list", "--json").stdout)["workers"]
        assert listed["free"] == {"cpu": 0, "memory": 3 << 30, "disk": 40 << 30, "gpus": 0}
        assert listed["reserved"]["cpu"] == 0 and listed["resources"]["cpu_available"] == 0

        status = cluster.flux("status")
        assert "free        0/2 cores   3.0/8.0 GiB memory" in status.stdout
        assert "free 0/2 (reserved 0)" in status.stdout
        fleet = json.loads(cluster.flux("status", "--json").stdout)["fleet"]
        assert fleet["free"] == {"cpu": 0, "memory": 3 << 30, "disk": 40 << 30, "gpus": 0}
        assert fleet["reserved"]["cpu"] == 0
    finally:
        stream.cancel()
