"""A worker's life: SIGTERM drains, reconnection after the server returns, health and reflection."""

from __future__ import annotations

import json
import signal

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from flux.auth import Role
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
