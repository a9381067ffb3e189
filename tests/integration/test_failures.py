"""Crashes lose nothing: a worker or the server killed with SIGKILL mid-flight."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import grpc
import pytest

from flux.errors import FluxError
from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.backends("sqlite", "postgres")]

COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
RUNNING = control_pb2.EXECUTION_STATE_RUNNING


def test_worker_killed_mid_execution_is_requeued_and_completes_elsewhere(cluster: Cluster) -> None:
    doomed = cluster.start_worker("doomed")
    # Killed as soon as it runs, then the survivor starts: started first, on a loaded host its
    # process start outlasted the body, which completed on doomed (attempt 1) before the kill.
    execution = cluster.run("sleepy", 5.0, wait=False)
    eventually(lambda: cluster.client.get(execution.execution_id).state == RUNNING, what="RUNNING on doomed")
    assert cluster.client.get(execution.execution_id).worker == "doomed"
    doomed.send_signal(signal.SIGKILL)
    cluster.start_worker("survivor")
    final = cluster.client.wait(execution.execution_id, timeout=30)
    assert final.state == COMPLETED
    assert (final.worker, final.attempt) == ("survivor", 2)
    assert json.loads(final.output_json)["attempt"] == 2
    rows = cluster.query(
        "SELECT state, worker, attempt FROM executions WHERE execution_id=?", execution.execution_id
    )
    assert rows == [(COMPLETED, "survivor", 2)]


def test_lost_worker_exhausting_max_attempts_fails_the_execution(tmp_path, transport: str) -> None:
    cluster = Cluster(tmp_path, transport)
    try:
        cluster.start_server("--ack-deadline", "2", "--grace-period", "1", "--safety-tick", "1")
        workflows = tmp_path / "once.py"
        workflows.write_text(
            "import asyncio\nfrom flux import workflow\n"
            "@workflow.with_options(name='once', max_attempts=1)\n"
            "async def once(ctx):\n    await asyncio.sleep(30)\n"
        )
        cluster.client.register_file(workflows)
        worker = cluster.start_worker("short-lived")
        execution = cluster.run("once", wait=False)
        eventually(lambda: cluster.client.get(execution.execution_id).state == RUNNING)
        worker.send_signal(signal.SIGKILL)
        final = cluster.client.wait(execution.execution_id, timeout=30)
        assert final.state == control_pb2.EXECUTION_STATE_FAILED
        assert final.error.type == "WorkerLost"
    finally:
        cluster.close()


def test_server_killed_under_submissions_loses_nothing_and_records_once(cluster: Cluster) -> None:
    cluster.start_worker("steady", "--capacity", "32")
    accepted: list[str] = []
    refused = 0
    killed = False
    started = time.monotonic()
    while len(accepted) < 150 and time.monotonic() - started < 60:
        if len(accepted) == 60 and not killed:
            cluster.kill_server()
            killed = True
            cluster.restart_server("--ack-deadline", "2", "--grace-period", "5", "--safety-tick", "1")
        try:
            accepted.append(cluster.client.run("sleepy", 0.05).execution_id)
        except FluxError:
            refused += 1  # the window while the server was down: never accepted, so never owed
            time.sleep(0.05)
    assert killed and len(accepted) == 150
    finals = cluster.wait_all(accepted, timeout=60)
    assert [f.state for f in finals] == [COMPLETED] * len(accepted)
    assert len({f.execution_id for f in finals}) == len(accepted)
    placeholders = ",".join("?" * len(accepted))
    states = cluster.query(
        f"SELECT execution_id, state FROM executions WHERE execution_id IN ({placeholders})", *accepted
    )
    assert sorted(states) == sorted((i, COMPLETED) for i in accepted)
    # Each recorded output is one real run's, from the attempt the record names.
    for final in finals:
        assert json.loads(final.output_json)["attempt"] == final.attempt


def test_work_the_server_wrongly_believes_a_returning_worker_runs_is_released_and_runs(
    cluster: Cluster,
) -> None:
    # The state a claim leaves when the server records it and dies before the worker hears
    # back: the store says RUNNING on a worker that does not run it. The worker comes back
    # within its grace period, so only Connected (what the server believes it holds, with
    # generations) can set this right: the worker releases what it does not run.
    cluster.start_worker("keeper")
    assert cluster.flux("worker", "pause", "keeper").returncode == 0
    execution = cluster.run("echo", "orphan", wait=False)
    assert cluster.client.get(execution.execution_id).state == control_pb2.EXECUTION_STATE_CREATED
    cluster.kill_server()
    cluster.execute(
        "UPDATE executions SET state=?, worker='keeper', generation=1 WHERE execution_id=?",
        RUNNING,
        execution.execution_id,
    )
    cluster.restart_server("--grace-period", "600")
    eventually(lambda: cluster.worker_connected("keeper"), what="keeper back")
    # On SQLite the pause ended with the process; PostgreSQL keeps it: resume either way. Until
    # the worker's new stream reaches the restarted server, resume answers "not connected" (on
    # PostgreSQL the listing above may still show the row the old server left).
    eventually(lambda: cluster.flux("worker", "resume", "keeper").returncode == 0, what="keeper resumed")
    final = cluster.client.wait(execution.execution_id, timeout=30)
    assert final.state == COMPLETED and final.worker == "keeper"
    assert json.loads(final.output_json) == {"input": "orphan", "worker": "keeper"}


def test_restart_keeps_queued_work_queued(cluster: Cluster) -> None:
    ids = [cluster.run("echo", i, wait=False).execution_id for i in range(5)]
    cluster.kill_server()
    cluster.restart_server()
    assert {cluster.client.get(i).state for i in ids} == {control_pb2.EXECUTION_STATE_CREATED}
    cluster.start_worker("late")
    outputs = [json.loads(f.output_json)["input"] for f in cluster.wait_all(ids)]
    assert outputs == list(range(5))


@pytest.mark.transports("grpc")  # raw gRPC stubs; the SSE twin is in test_gateway.py
def test_unclaimed_dispatch_returns_to_created_after_the_ack_deadline(cluster: Cluster) -> None:

    from flux.security import Role
    from flux.v1 import resources_pb2, worker_pb2, worker_pb2_grpc

    channel = cluster.channel(Role.WORKER)
    stub = worker_pb2_grpc.WorkerServiceStub(channel)
    resources = resources_pb2.WorkerResources(cpu_total=4, cpu_available=4)
    token = stub.Register(worker_pb2.RegisterRequest(name="silent", resources=resources)).session_token
    stream = stub.Connect(worker_pb2.ConnectRequest(name="silent", session_token=token))
    events = (e for e in stream if e.WhichOneof("event") != "ping")
    next(events)
    execution = cluster.run("echo", "x", wait=False)
    frame = next(events)
    assert frame.execution_scheduled.execution_id == execution.execution_id
    # The silent worker never claims; after the 2 s ack deadline the execution is CREATED again.
    cancelled = next(events)
    assert cancelled.execution_cancelled.execution_id == execution.execution_id
    assert cancelled.execution_cancelled.reason == "ack deadline expired"
    stream.cancel()
    channel.close()
    cluster.start_worker("diligent")
    final = cluster.client.wait(execution.execution_id, timeout=30)
    assert final.state == COMPLETED and final.worker == "diligent"
    assert final.generation >= 2  # a fresh dispatch, fenced past the expired one


def test_workers_killed_mid_burst_leave_every_submission_answered_and_run(cluster: Cluster) -> None:
    """Workers SIGKILLed while results commit must not touch other callers' submissions.

    A dying worker's cut completion once cancelled the store batch it shared with
    RunWorkflow calls: those went unanswered until their deadline, and their rows were
    stored but never queued.
    """
    token = cluster.token(Role.CLIENT)
    answered: list[str] = []
    failures: list[str] = []

    async def burst(n: int) -> None:
        async with grpc.aio.insecure_channel(cluster.address) as channel:
            control = control_pb2_grpc.ControlServiceStub(channel)
            metadata = (("authorization", f"Bearer {token}"),)
            remaining = iter(range(n))

            async def submitter() -> None:
                for i in remaining:
                    request = control_pb2.RunWorkflowRequest(workflow_name="echo", input_json=str(i))
                    try:
                        execution = await control.RunWorkflow(request, metadata=metadata, timeout=20)
                        answered.append(execution.execution_id)
                    except grpc.aio.AioRpcError as exc:
                        failures.append(f"{exc.code().name}: {exc.details()}")

            await asyncio.gather(*(submitter() for _ in range(32)))

    async def rounds() -> None:
        for round in range(3):
            workers = [
                await asyncio.to_thread(cluster.start_worker, f"doomed-{round}-{i}", "--capacity", "64")
                for i in range(3)
            ]
            submitting = asyncio.ensure_future(burst(300))
            await asyncio.sleep(0.3)  # results are being committed now
            for worker in workers:
                worker.kill()
            await submitting
            for worker in workers:
                worker.wait()

    asyncio.run(rounds())
    assert failures == []
    assert len(answered) == 900
    cluster.start_worker("survivor", "--capacity", "64")
    final = cluster.client.wait_all([control_pb2.Execution(execution_id=i) for i in answered], timeout=120)
    assert {e.state for e in final} == {COMPLETED}
