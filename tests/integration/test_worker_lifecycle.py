"""A worker's life: SIGTERM drains, reconnection after the server returns, health and reflection."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = [pytest.mark.integration, pytest.mark.backends("sqlite", "postgres")]

RUNNING = control_pb2.EXECUTION_STATE_RUNNING


def test_sigterm_finishes_running_work_then_exits(cluster: Cluster) -> None:
    worker = cluster.start_worker("graceful")
    execution = cluster.run("sleepy", 1.5, wait=False)
    eventually(lambda: cluster.client.get(execution.execution_id).state == RUNNING)
    worker.send_signal(signal.SIGTERM)
    final = cluster.client.wait(execution.execution_id, timeout=30)
    assert final.state == control_pb2.EXECUTION_STATE_COMPLETED
    assert (final.worker, final.attempt) == ("graceful", 1)
    assert worker.wait(timeout=30) == 0
    # Work submitted after the drain waits for another worker instead of going to the leaving one.
    later = cluster.run("echo", "after", wait=False)
    cluster.start_worker("successor")
    assert json.loads(cluster.client.wait(later.execution_id, 30).output_json)["worker"] == "successor"


def test_worker_reconnects_after_the_server_restarts(cluster: Cluster) -> None:
    cluster.start_worker("loyal")
    cluster.kill_server()
    cluster.restart_server()
    eventually(lambda: cluster.worker_connected("loyal"), timeout=30, what="the worker to reconnect")
    assert json.loads(cluster.run("echo", 7).output_json) == {"input": 7, "worker": "loyal"}


@pytest.mark.transports("grpc")  # about the core's gRPC services only
def test_health_and_reflection_are_served(cluster: Cluster) -> None:
    with cluster.channel(Role.CLIENT) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "flux.v1.WorkerService", "flux.v1.ControlService"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        names = {s.name for s in next(responses).list_services_response.service}
        assert {"flux.v1.WorkerService", "flux.v1.ControlService", "grpc.health.v1.Health"} <= names


BUF = Path(__file__).parents[2] / "tools" / "buf.sh"


@pytest.mark.transports("grpc")
def test_health_list_answers_every_service(cluster: Cluster) -> None:
    with cluster.channel(Role.CLIENT) as channel:
        answer = health_pb2_grpc.HealthStub(channel).List(health_pb2.HealthListRequest(), timeout=5)
    assert set(answer.statuses) == {"", "flux.v1.WorkerService", "flux.v1.ControlService"}
    assert {s.status for s in answer.statuses.values()} == {health_pb2.HealthCheckResponse.SERVING}


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
@pytest.mark.skipif(shutil.which("npm") is None, reason="buf is installed with npm (tools/buf.sh)")
def test_buf_curl_lists_and_calls_through_reflection_v1(cluster: Cluster) -> None:
    """A reflection client nobody here wrote: buf curl, held to reflection v1 (no v1alpha fallback)."""
    base = ["--protocol", "grpc", "--http2-prior-knowledge", "--reflect-protocol", "grpc-v1"]

    def buf(*args: str) -> str:
        done = subprocess.run(
            [str(BUF), "curl", *base, *args], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    url = f"http://{cluster.address}"
    services = set(buf("--list-services", url).split())
    assert {
        "flux.v1.ControlService", "flux.v1.WorkerService", "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
    } <= services  # fmt: skip
    assert "grpc.health.v1.Health/List" in buf("--list-methods", url).split()
    listed = json.loads(buf(f"{url}/grpc.health.v1.Health/List"))
    assert listed["statuses"]["flux.v1.ControlService"]["status"] == "SERVING"
    checked = json.loads(buf("-d", '{"service": ""}', f"{url}/grpc.health.v1.Health/Check"))
    assert checked == {"status": "SERVING"}
