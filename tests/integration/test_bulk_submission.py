"""Bulk submission end to end: RunWorkflows over gRPC, `flux workflow run --many`, POST run-many, map().

A real server (gRPC core and gateway) on SQLite, and on PostgreSQL where the server
runs as a replica (shared mode), with real worker processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest

from flux.errors import InvalidArgument
from flux.security import Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
WORKFLOWS = Path(__file__).with_name("workflows.py")


def api(cluster: Cluster) -> httpx.Client:
    headers = {"Authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
    return httpx.Client(base_url=cluster.gateway_url, headers=headers, timeout=30, trust_env=False)


def stored_count(cluster: Cluster) -> int:
    return cluster.query("SELECT count(*) FROM executions")[0][0]


@pytest.mark.backends("sqlite", "postgres")
def test_every_way_to_submit_in_bulk_runs_each_input_once_in_order(cluster: Cluster, tmp_path):
    cluster.start_worker("w1", "--capacity", "4")
    client = cluster.client

    # Python client: map() waits for every output, in input order.
    finals = client.map("echo", [{"n": n} for n in range(12)], wait=True, timeout=60)
    assert [json.loads(f.output_json)["input"] for f in finals] == [{"n": n} for n in range(12)]
    assert len({f.execution_id for f in finals}) == 12 and all(f.state == COMPLETED for f in finals)

    # gRPC: one call, the executions in input order, each its own record with its own input.
    stub = control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))
    answer = stub.RunWorkflows(
        control_pb2.RunWorkflowsRequest(workflow_name="echo", input_json=['"a"', "", "[1, 2]"], priority=5)
    )
    ids = [e.execution_id for e in answer.executions]
    assert len(set(ids)) == 3 and all(e.priority == 5 for e in answer.executions)
    outputs = [json.loads(f.output_json)["input"] for f in cluster.wait_all(ids)]
    assert outputs == ["a", None, [1, 2]]
    assert [client.get(i).input_json for i in ids] == ['"a"', "null", "[1, 2]"]

    # CLI: JSON Lines from a file (blank lines skipped), ids only, then the outputs with --wait.
    lines = tmp_path / "inputs.jsonl"
    lines.write_text('1\n\n"two"\n{"three": 3}\n')
    submitted = cluster.flux("workflow", "run", "echo", "--input-file", str(lines), "--many")
    assert submitted.returncode == 0, submitted.stderr
    printed = submitted.stdout.split()
    assert len(printed) == 3
    assert [json.loads(f.output_json)["input"] for f in cluster.wait_all(printed)] == [1, "two", {"three": 3}]
    waited = cluster.flux("workflow", "run", "echo", "--input-file", str(lines), "--many", "--wait")
    assert waited.returncode == 0, waited.stderr
    assert [json.loads(line)["input"] for line in waited.stdout.splitlines()] == [1, "two", {"three": 3}]

    # CLI from stdin.
    piped = subprocess.run(
        [sys.executable, "-m", "flux", "workflow", "run", "echo", "--input-file", "-", "--many", "--wait"],
        input="[1]\n[2]\n", capture_output=True, text=True, timeout=60, cwd=cluster.workdir,
        env={**os.environ, "FLUX_SERVER": cluster.address},
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert [json.loads(line)["input"] for line in piped.stdout.splitlines()] == [[1], [2]]

    # HTTP: 202 with the executions in input order; the same auth as run.
    with api(cluster) as http:
        response = http.post("/workflows/echo/run-many", json={"inputs": [True, {"x": None}], "version": 0})
        assert response.status_code == 202, response.text
        executions = response.json()["executions"]
        assert [e["state"] for e in executions] != [] and len(executions) == 2
        finals = cluster.wait_all([e["execution_id"] for e in executions])
        assert [json.loads(f.output_json)["input"] for f in finals] == [True, {"x": None}]
        anonymous = httpx.post(f"{cluster.gateway_url}/workflows/echo/run-many", json={"inputs": [1]})
        assert anonymous.status_code == 401

    assert stored_count(cluster) == 12 + 3 + 3 + 3 + 2 + 2


@pytest.mark.backends("sqlite", "postgres")
def test_a_bad_input_refuses_the_whole_call_on_every_transport(cluster: Cluster, tmp_path):
    stub = control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))
    with pytest.raises(grpc.RpcError) as refused:
        stub.RunWorkflows(control_pb2.RunWorkflowsRequest(workflow_name="echo", input_json=["1", "2", "{no"]))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "input_json[2] is not valid JSON" in refused.value.details()
    with pytest.raises(grpc.RpcError) as too_many:
        stub.RunWorkflows(control_pb2.RunWorkflowsRequest(workflow_name="echo", input_json=["1"] * 10_001))
    assert too_many.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "the limit is 10000 per call" in too_many.value.details()

    lines = tmp_path / "inputs.jsonl"
    lines.write_text('1\n2\n\n{"oops": }\n')
    bad = cluster.flux("workflow", "run", "echo", "--input-file", str(lines), "--many")
    assert bad.returncode == 1
    assert f"{lines}:4: not JSON:" in bad.stderr
    # NaN passes Python's json but is not JSON: the server refuses it, named by its line.
    lines.write_text("1\nNaN\n")
    nan = cluster.flux("workflow", "run", "echo", "--input-file", str(lines), "--many")
    assert nan.returncode == 1 and f"{lines}:2 is not valid JSON" in nan.stderr, nan.stderr
    missing = cluster.flux("workflow", "run", "echo", "--many")
    assert missing.returncode == 2 and "--many reads JSON Lines" in missing.stderr

    with pytest.raises(InvalidArgument, match=r"inputs\[1\] cannot be sent as JSON"):
        cluster.client.map("echo", [1, float("nan")])

    with api(cluster) as http:
        nan_body = http.post(
            "/workflows/echo/run-many",
            content=b'{"inputs": [1, 2, NaN]}',
            headers={"Content-Type": "application/json"},
        )
        assert nan_body.status_code == 422 and "inputs[2]" in nan_body.json()["error"]["message"], (
            nan_body.text
        )
        over = http.post("/workflows/echo/run-many", json={"inputs": [1] * 10_001})
        assert over.status_code == 413 and "the limit is 10000 per call" in over.json()["error"]["message"]
        unknown = http.post("/workflows/nope/run-many", json={"inputs": [1]})
        assert unknown.status_code == 404
        empty = http.post("/workflows/echo/run-many", json={"inputs": []})
        assert empty.status_code == 422

    assert stored_count(cluster) == 0


def test_wait_reports_each_failure_by_line_and_exits_1(cluster: Cluster, tmp_path):
    cluster.start_worker("w1")
    lines = tmp_path / "inputs.jsonl"
    lines.write_text('"a"\n"b"\n')
    failed = cluster.flux("workflow", "run", "boom", "--input-file", str(lines), "--many", "--wait")
    assert failed.returncode == 1
    assert failed.stdout == "\n\n"  # one line per input, empty where there is no output
    assert f"{lines}:1: execution" in failed.stderr and "boom: a" in failed.stderr
    assert f"{lines}:2: execution" in failed.stderr and "boom: b" in failed.stderr


def test_the_pending_limit_admits_a_batch_as_a_whole(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--max-pending", "5")
        cluster.register(WORKFLOWS)
        cluster.client.map("echo", [1, 2, 3])  # no worker: they stay pending
        with pytest.raises(Exception, match=r"these 3 would pass the limit of 5 \(--max-pending\)"):
            cluster.client.map("echo", [4, 5, 6])
        assert stored_count(cluster) == 3
    finally:
        cluster.close()


@pytest.mark.backends("postgres")
def test_a_batch_sent_to_one_replica_runs_on_the_workers_of_another(cluster: Cluster):
    other = cluster.start_replica("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
    cluster.start_worker("far", "--capacity", "4", servers=[other])
    # Stored in one transaction by the first replica, announced, claimed by the second.
    finals = cluster.client.map("echo", list(range(20)), wait=True, timeout=60)
    assert [json.loads(f.output_json) for f in finals] == [{"input": n, "worker": "far"} for n in range(20)]
