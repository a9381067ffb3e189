"""Issue 12, core side, against real servers and workers: a worker's name stays its own during
its grace period, `flux worker forget` frees it, and memory stays bounded under pending work."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from flux.errors import ResourceExhausted
from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, resources_pb2, worker_pb2, worker_pb2_grpc

from .conftest import WORKFLOWS

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
RUNNING = control_pb2.EXECUTION_STATE_RUNNING
# Long enough that nothing in a test waits it out: only a token or an operator frees a name.
GRACE = ("--ack-deadline", "2", "--grace-period", "120", "--safety-tick", "1")


@pytest.fixture
def held(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    db = request.getfixturevalue("pg_url") if backend == "postgres" else "flux.db"
    c = Cluster(tmp_path, db=db)
    try:
        c.start_server(*GRACE)
        c.register(WORKFLOWS)
        yield c
    finally:
        c.close()


def _register(cluster: Cluster, name: str, session_token: str = "") -> worker_pb2.RegisterResponse:
    with cluster.channel(Role.WORKER) as channel:
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        resources = resources_pb2.WorkerResources(cpu_total=4, cpu_available=4)
        request = worker_pb2.RegisterRequest(name=name, resources=resources, session_token=session_token)
        return stub.Register(request, timeout=10)


def _stream_down(cluster: Cluster, worker) -> None:  # type: ignore[no-untyped-def]
    """Freeze the worker, then restart the server: its stream is gone and it cannot come back yet."""
    worker.send_signal(signal.SIGSTOP)
    cluster.kill_server()
    cluster.restart_server(*GRACE)
    eventually(lambda: not cluster.worker_connected("w1"), what="w1's stream to be down")


@pytest.mark.backends("sqlite", "postgres")
def test_during_the_grace_period_only_the_session_token_takes_the_name_back(held: Cluster) -> None:
    real = held.start_worker("w1")
    execution = held.run("sleepy", 2.0, wait=False)
    eventually(lambda: held.client.get(execution.execution_id).state == RUNNING, what="RUNNING on w1")
    # As in the test below: a claim is stored soon, not at once, and a kill before that leaves w1
    # holding nothing after the restart (so nothing keeps its name). Wait until it is stored.
    stored = "SELECT state FROM executions WHERE execution_id = ?"
    eventually(lambda: held.query(stored, execution.execution_id) == [(RUNNING,)], what="the claim stored")
    _stream_down(held, real)
    try:
        with pytest.raises(grpc.RpcError) as refused:
            _register(held, "w1")  # the worker token, but not w1's session token
        assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
        details = refused.value.details()
        assert "keeps the name for its grace period, until 20" in details
        assert "'flux worker forget w1'" in details
        # Nothing moved: the work still belongs to w1.
        current = held.client.get(execution.execution_id)
        assert (current.state, current.worker) == (RUNNING, "w1")
    finally:
        real.send_signal(signal.SIGCONT)
    # The real worker reconnects with its session token and finishes its own attempt.
    final = held.client.wait(execution.execution_id, timeout=60)
    assert final.state == COMPLETED
    assert (final.worker, final.attempt, json.loads(final.output_json)["worker"]) == ("w1", 1, "w1")
    eventually(lambda: held.worker_connected("w1"), what="w1 to reconnect")


@pytest.mark.backends("sqlite", "postgres")
def test_flux_worker_forget_frees_the_name_and_requeues_the_work(held: Cluster) -> None:
    real = held.start_worker("w1")
    execution = held.run("sleepy", 30.0, wait=False)
    eventually(lambda: held.client.get(execution.execution_id).state == RUNNING, what="RUNNING on w1")
    # A claim is stored soon, not at once, and the server is killed next: a claim a crash loses
    # leaves the row SCHEDULED, whose requeue rightly keeps attempt 1. Wait until it is stored.
    stored = "SELECT state FROM executions WHERE execution_id = ?"
    eventually(lambda: held.query(stored, execution.execution_id) == [(RUNNING,)], what="the claim stored")
    _stream_down(held, real)
    try:
        forgot = held.flux("worker", "forget", "w1")
        assert forgot.returncode == 0, forgot.stderr
        assert forgot.stdout.strip() == "forgot worker w1; 1 executions requeued"
        requeued = eventually(
            lambda: (
                (e := held.client.get(execution.execution_id)).state == control_pb2.EXECUTION_STATE_CREATED
                and e
            ),
            what="the execution back in the queue",
        )
        assert requeued.attempt == 2
        # The name is free at once.
        assert _register(held, "w1").session_token
        unknown = held.flux("worker", "forget", "nobody")
        assert unknown.returncode != 0 and "worker 'nobody' is not registered" in unknown.stderr
    finally:
        real.kill()
        real.wait(timeout=10)


def test_forget_over_http_needs_the_api_token(held: Cluster) -> None:
    url = f"{held.gateway_url}/workers/w9/forget"
    api = {"Authorization": f"Bearer {held.token(Role.CLIENT)}"}
    worker = {"Authorization": f"Bearer {held.token(Role.WORKER)}"}
    with httpx.Client(timeout=10) as http:
        assert http.post(url).status_code == 401
        assert http.post(url, headers=worker).status_code == 403
        missing = http.post(url, headers=api)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
        _register(held, "w9")
        answer = http.post(url, headers=api)
        assert (answer.status_code, answer.json()) == (200, {"requeued": 0})
        assert http.post(url, headers=api).status_code == 404


# ---- bounded memory ------------------------------------------------------------------------------


@pytest.mark.backends("sqlite", "postgres")
def test_large_pending_inputs_reach_the_worker_intact(cluster: Cluster) -> None:
    # Above the 16 KiB inline threshold: kept in the store while pending, loaded at dispatch.
    inputs = [{"n": i, "blob": chr(65 + i) * (64 * 1024)} for i in range(5)] + [{"n": 99}]
    ids = [cluster.run("echo", value, wait=False).execution_id for value in inputs]
    assert json.loads(cluster.client.get(ids[0]).input_json) == inputs[0]  # still shown while pending
    cluster.start_worker("late")
    finals = cluster.wait_all(ids, timeout=60)
    assert [json.loads(f.output_json)["input"] for f in finals] == inputs
    assert json.loads(cluster.client.get(ids[1]).input_json) == inputs[1]


@pytest.mark.backends("sqlite", "postgres")
def test_admission_limits_refuse_with_resource_exhausted_naming_the_limit(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    db = request.getfixturevalue("pg_url") if backend == "postgres" else "flux.db"
    cluster = Cluster(tmp_path, db=db)
    try:
        cluster.start_server("--max-pending", "3", "--max-pending-bytes", "64Ki", "--max-workers", "1")
        cluster.register(WORKFLOWS)
        for _ in range(3):
            cluster.run("echo", 1, wait=False)
        with pytest.raises(ResourceExhausted, match=r"the limit is 3 \(--max-pending\)"):
            cluster.run("echo", 1, wait=False)
        refused = cluster.flux("workflow", "run", "echo", "1")
        assert refused.returncode != 0 and "--max-pending" in refused.stderr
        cluster.start_worker("only")
        with pytest.raises(grpc.RpcError) as too_many:
            _register(cluster, "second")
        assert too_many.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the limit is 1 (--max-workers)" in too_many.value.details()
    finally:
        cluster.close()


def test_pending_input_bytes_are_limited(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--max-pending-bytes", "100Ki")
        cluster.register(WORKFLOWS)
        cluster.run("echo", "x" * (60 * 1024), wait=False)
        with pytest.raises(ResourceExhausted, match=r"the limit of 102400 \(--max-pending-bytes\)"):
            cluster.run("echo", "x" * (60 * 1024), wait=False)
        cluster.run("echo", "x" * (30 * 1024), wait=False)
    finally:
        cluster.close()
