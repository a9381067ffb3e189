"""Runtimes in matching: workers advertise what they execute, workflows need what they were written for.

The Node worker's side (a worker that runs no Python) is in test_node_client.py.
"""

from __future__ import annotations

import json
import platform

import grpc
import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = pytest.mark.integration

CREATED = control_pb2.EXECUTION_STATE_CREATED
SOURCE = "async def shout(ctx):\n    return ctx.input\n"


def _register(cluster: Cluster, name: str, runtime: str) -> control_pb2.RegisterWorkflowResponse:
    with cluster.channel(Role.CLIENT) as channel:
        return control_pb2_grpc.ControlServiceStub(channel).RegisterWorkflow(
            control_pb2.RegisterWorkflowRequest(
                filename="shout.rb",
                source=SOURCE,
                workflows=[control_pb2.WorkflowMetadata(name=name, entrypoint="shout", runtime=runtime)],
            ),
            timeout=5,
        )


def test_python_worker_advertises_its_interpreter_and_skips_other_runtimes(cluster: Cluster) -> None:
    cluster.start_worker("py")
    listed = json.loads(cluster.flux("workers", "list", "--json").stdout)["workers"]
    assert listed[0]["runtimes"] == [f"python {platform.python_version()}"]  # over either transport

    _register(cluster, "in_ruby", "ruby")
    waiting = cluster.run("in_ruby", "x", wait=False)
    assert cluster.run("echo", 1).state == control_pb2.EXECUTION_STATE_COMPLETED  # Python work still runs
    explanation = cluster.client.explain(waiting.execution_id)
    assert explanation.infeasible and explanation.summary.startswith(
        "0/1 workers can run it: 1 lacks runtime ruby"
    )
    (rejection,) = explanation.workers[0].rejections
    assert (rejection.reason, rejection.permanent, rejection.wanted) == ("missing_runtime", True, "ruby")
    assert cluster.client.get(waiting.execution_id).state == CREATED

    shown = json.loads(cluster.flux("workflow", "show", "in_ruby", "--json").stdout)["versions"]
    assert [(v["runtime"], v["filename"]) for v in shown] == [("ruby", "shout.rb")]
    # What `flux workflow register` sends for a Python file, with no runtime named: Python.
    assert {
        w["name"]: w["runtime"]
        for w in json.loads(cluster.flux("workflow", "list", "--json").stdout)["workflows"]
    }["echo"] == "python"


@pytest.mark.transports("grpc")
def test_bad_runtimes_are_refused_by_field(cluster: Cluster) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _register(cluster, "bad", "Ruby 3")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "workflows[0].runtime 'Ruby 3' is invalid" in caught.value.details()

    body = {
        "name": "odd",
        "resources": {"cpu_total": 1, "cpu_available": 1},
        "software": {"runtimes": ["python 3.11", "!!"]},
    }
    headers = {"authorization": f"Bearer {cluster.token(Role.WORKER)}"}
    answer = httpx.post(
        f"{cluster.gateway_url}/workers/register", json=body, headers=headers, timeout=10, trust_env=False
    )
    assert answer.status_code == 422, answer.text
    assert "software.runtimes[1]" in answer.json()["error"]["message"]
    # An HTTP worker declares its runtimes the same way, and is listed with them.
    body["software"] = {"runtimes": ["node 20.11.1"]}
    assert httpx.post(
        f"{cluster.gateway_url}/workers/register", json=body, headers=headers, timeout=10, trust_env=False
    ).is_success
    (odd,) = [w for w in cluster.client.workers().workers if w.name == "odd"]
    assert list(odd.runtimes) == ["node 20.11.1"]
