"""PostgreSQL going away under a running server: real server, gateway, worker and PostgreSQL.

Each test pauses a PostgreSQL of its own (the session's serves the other tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.testing.postgres import ENV_URL, TemporaryPostgres
from flux.v1 import control_pb2, control_pb2_grpc

from .conftest import WORKFLOWS

pytestmark = pytest.mark.integration

FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED


@pytest.fixture
def own_postgres() -> Iterator[TemporaryPostgres]:
    if os.environ.get(ENV_URL):
        pytest.skip(f"stops its own PostgreSQL; the server at {ENV_URL} is not ours to stop")
    with TemporaryPostgres() as server:
        yield server


@pytest.fixture
def outage_cluster(tmp_path: Path, own_postgres: TemporaryPostgres) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db=own_postgres.database())
    try:
        c.start_server(*FAST)
        c.register(WORKFLOWS)
        yield c
    finally:
        c.close()


def _get(control: control_pb2_grpc.ControlServiceStub, execution_id: str) -> control_pb2.Execution:
    # Well past the store's wait for a connection: the answer is the server's, not our deadline.
    return control.GetExecution(control_pb2.GetExecutionRequest(execution_id=execution_id), timeout=30)


def test_get_execution_while_postgres_is_down_is_unavailable_then_answers_again(
    outage_cluster: Cluster, own_postgres: TemporaryPostgres
) -> None:
    c = outage_cluster
    c.start_worker("w1")
    done = c.run("echo", {"n": 1})
    assert done.state == COMPLETED
    control = control_pb2_grpc.ControlServiceStub(c.channel(Role.CLIENT))
    http = httpx.Client(
        base_url=c.gateway_url, timeout=30, trust_env=False,
        headers={"Authorization": f"Bearer {c.token(Role.CLIENT)}"},
    )  # fmt: skip
    own_postgres.pause()
    try:
        # An id the server does not hold in memory is looked up in the store, which is away.
        for _ in range(2):  # a pooled connection the shutdown ended, then one that cannot connect
            with pytest.raises(grpc.RpcError) as info:
                _get(control, "not-in-memory")
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
            assert "the database is unavailable" in info.value.details()
        with pytest.raises(grpc.RpcError) as info:
            control.ListExecutions(control_pb2.ListExecutionsRequest(), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
        answer = http.get("/executions/not-in-memory")
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "UNAVAILABLE"
        assert "the database is unavailable" in answer.json()["error"]["message"]
    finally:
        own_postgres.resume()
    eventually(
        lambda: _answers(control, "not-in-memory"), timeout=60, interval=0.2, what="GetExecution to answer"
    )
    assert _get(control, done.execution_id).state == COMPLETED
    http.close()
    log = (c.workdir / "server.log").read_text()
    # grpc's own report of a handler that raised (the UNKNOWN the client used to get).
    assert "raised by servicer method" not in log and "Unexpected error" not in log, log[-3000:]
    assert "a request met an unavailable store" in log


def _answers(control: control_pb2_grpc.ControlServiceStub, execution_id: str) -> bool:
    try:
        _get(control, execution_id)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:  # the store answered: there is no such execution
            return True
        if exc.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        return False
    return True


def test_work_finishing_while_postgres_restarts_is_recorded_once_it_is_back(
    outage_cluster: Cluster, own_postgres: TemporaryPostgres
) -> None:
    # Results delivered while the database is away fail to commit: the worker retries, and what
    # the server failed to write (claims, a requeue) it writes again once it can. Nothing is left
    # RUNNING, nothing is recorded twice, and the log says what happened in one line per failure,
    # not a traceback per heartbeat.
    c = outage_cluster
    c.start_worker("w1", "--capacity", "8")
    ids = [c.run("sleepy", 1.0, wait=False).execution_id for _ in range(6)]
    eventually(
        lambda: all(c.client.get(i).state == control_pb2.EXECUTION_STATE_RUNNING for i in ids),
        what="every execution RUNNING",
    )
    own_postgres.pause()
    try:
        log = c.workdir / "worker-w1.log"  # the worker retries while the commit fails
        eventually(lambda: "could not deliver the result" in log.read_text() or None, timeout=30,
                   what="a result to fail to commit")  # fmt: skip
    finally:
        own_postgres.resume()
    finals = c.wait_all(ids, timeout=90)
    assert [f.state for f in finals] == [COMPLETED] * len(ids)
    rows = dict(
        c.query(
            f"SELECT execution_id, state FROM executions WHERE execution_id IN ({','.join('?' * len(ids))})",
            *ids,
        )
    )
    assert rows == dict.fromkeys(ids, COMPLETED)
    text = (c.workdir / "server.log").read_text()
    assert "Traceback" not in text, text[-4000:]
