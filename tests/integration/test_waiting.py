"""Run-and-wait in one call (RunAndWait) and many waits in one stream (WaitExecutions), through
the blocking client, the asyncio client (flux.aio) and raw gRPC, on a real server and real workers.

Completion order is made deterministic by cancelling pending executions one at a time: a
cancel is a final state the test chooses the moment of, where a run's end is not.
"""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from flux import aio
from flux.client import FluxClient, WaitTimedOut
from flux.errors import InvalidArgument, NotFound, Unavailable
from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

S = control_pb2
WORKFLOWS = Path(__file__).with_name("workflows.py")


def control(cluster: Cluster) -> control_pb2_grpc.ControlServiceStub:
    return control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))


def test_run_and_wait_answers_the_receipt_then_the_final_state_in_one_call(cluster: Cluster):
    cluster.start_worker("w1")
    stub = control(cluster)
    run = S.RunWorkflowRequest(workflow_name="echo", input_json='"hi"')
    answers = list(stub.RunAndWait(S.RunAndWaitRequest(run=run), timeout=30))
    assert len(answers) == 2
    receipt, final = answers
    assert receipt.execution_id == final.execution_id
    assert receipt.input_json == '"hi"'  # the receipt is RunWorkflow's answer
    assert final.state == S.EXECUTION_STATE_COMPLETED
    assert json.loads(final.output_json)["input"] == "hi"
    stored = cluster.query("SELECT count(*) FROM executions WHERE execution_id = ?", final.execution_id)
    assert stored[0][0] == 1

    every = list(stub.RunAndWait(S.RunAndWaitRequest(run=run, every_state=True), timeout=30))
    states = [e.state for e in every]
    # The receipt may already be dispatched; each state after it is news, in lifecycle order.
    assert states[0] in (S.EXECUTION_STATE_CREATED, S.EXECUTION_STATE_SCHEDULED)
    assert states[-1] == S.EXECUTION_STATE_COMPLETED
    assert states == sorted(set(states))


def test_run_and_wait_refuses_bad_runs_with_the_field_named(cluster: Cluster):
    stub = control(cluster)
    with pytest.raises(grpc.RpcError) as unknown:
        list(stub.RunAndWait(S.RunAndWaitRequest(run=S.RunWorkflowRequest(workflow_name="nope")), timeout=10))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in unknown.value.details()
    bad = S.RunWorkflowRequest(workflow_name="echo", input_json="{not json")
    with pytest.raises(grpc.RpcError) as invalid:
        list(stub.RunAndWait(S.RunAndWaitRequest(run=bad), timeout=10))
    assert (
        invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "input_json" in invalid.value.details()
    )
    # Refused means not stored.
    assert cluster.query("SELECT count(*) FROM executions")[0][0] == 0


def _answers_by_run(answers: object, runs: int) -> dict[int, list[S.RunAndWaitStreamResponse]]:
    """Each run's answers, read until every run has its last one (finished or refused)."""
    by_run: dict[int, list[S.RunAndWaitStreamResponse]] = {}
    done = 0
    for answer in answers:  # type: ignore[attr-defined]
        by_run.setdefault(answer.run_id, []).append(answer)
        done += answer.WhichOneof("answer") != "accepted"
        if done == runs:
            break
    return by_run


def test_run_and_wait_stream_answers_each_run_under_its_id_and_a_refusal_ends_only_that_run(
    cluster: Cluster,
):
    stub = control(cluster)
    requests: queue.Queue[S.RunAndWaitStreamRequest | None] = queue.Queue()
    call = stub.RunAndWaitStream(iter(requests.get, None), timeout=60)
    # The slow one first: its final state comes after the others' (runs finish in any order).
    runs = {
        7: S.RunWorkflowRequest(workflow_name="sleepy", input_json="1.0"),
        8: S.RunWorkflowRequest(workflow_name="nope"),
        9: S.RunWorkflowRequest(workflow_name="echo", input_json="{not json"),
        10: S.RunWorkflowRequest(workflow_name="echo", input_json='"hi"'),
    }
    for run_id, run in runs.items():
        requests.put(S.RunAndWaitStreamRequest(run_id=run_id, run=run))
    refused = _answers_by_run(call, 2)  # no worker yet: only the refusals are last answers
    assert refused[8][-1].refused.code == "NOT_FOUND" and "nope" in refused[8][-1].refused.message
    assert (
        refused[9][-1].refused.code == "INVALID_ARGUMENT" and "input_json" in refused[9][-1].refused.message
    )
    cluster.start_worker("w1", "--capacity", "2")
    answered = _answers_by_run(call, 2)
    for run_id in (7, 10):
        kinds = [a.WhichOneof("answer") for a in refused.get(run_id, []) + answered[run_id]]
        assert kinds == ["accepted", "finished"], (run_id, kinds)
        receipt, final = (
            (refused.get(run_id, []) + answered[run_id])[0].accepted,
            answered[run_id][-1].finished,
        )
        assert receipt.execution_id == final.execution_id and final.state == S.EXECUTION_STATE_COMPLETED
    assert json.loads(answered[10][-1].finished.output_json)["input"] == "hi"
    # The call is still open for the next run; closing our side ends it once all are answered.
    requests.put(S.RunAndWaitStreamRequest(run_id=11, run=runs[10]))
    requests.put(None)
    rest = list(call)
    assert [a.WhichOneof("answer") for a in rest] == ["accepted", "finished"] and rest[0].run_id == 11
    # Refused means not stored: the three accepted runs only.
    assert cluster.query("SELECT count(*) FROM executions")[0][0] == 3


def _run_stream(cluster: Cluster) -> tuple[queue.Queue[S.RunAndWaitStreamRequest | None], Any]:
    """An open RunAndWaitStream call: what is put on the queue is sent (None closes our side)."""
    requests: queue.Queue[S.RunAndWaitStreamRequest | None] = queue.Queue()
    return requests, control(cluster).RunAndWaitStream(iter(requests.get, None), timeout=60)


def test_a_receipt_asked_to_wait_is_sent_only_for_a_run_still_going_then(cluster: Cluster):
    requests, call = _run_stream(cluster)
    echo = S.RunWorkflowRequest(workflow_name="echo", input_json='"hi"')
    # No worker: the run cannot end, so its receipt comes once its 100 ms have passed.
    requests.put(S.RunAndWaitStreamRequest(run_id=1, run=echo, receipt_after_ms=100))
    receipt = next(call)
    assert receipt.run_id == 1 and receipt.WhichOneof("answer") == "accepted"
    assert receipt.accepted.state == S.EXECUTION_STATE_CREATED
    cluster.start_worker("w1")
    final = next(call)
    assert (
        final.WhichOneof("answer") == "finished"
        and final.finished.execution_id == receipt.accepted.execution_id
    )
    # A run that ends within its minute is answered by its final state alone, its id in it.
    requests.put(S.RunAndWaitStreamRequest(run_id=2, run=echo, receipt_after_ms=60_000))
    only = next(call)
    assert only.run_id == 2 and only.WhichOneof("answer") == "finished"
    assert only.finished.state == S.EXECUTION_STATE_COMPLETED
    assert cluster.client.get(only.finished.execution_id).state == S.EXECUTION_STATE_COMPLETED
    # Past a minute: refused, naming the field and the accepted range, and nothing stored.
    requests.put(S.RunAndWaitStreamRequest(run_id=3, run=echo, receipt_after_ms=60_001))
    refused = next(call)
    assert refused.run_id == 3 and refused.refused.code == "INVALID_ARGUMENT"
    assert "receipt_after_ms" in refused.refused.message and "60000" in refused.refused.message
    requests.put(None)
    assert list(call) == []
    assert cluster.query("SELECT count(*) FROM executions")[0][0] == 2


def test_a_run_whose_receipt_may_wait_is_stored_before_its_receipt_and_outlives_a_crash(cluster: Cluster):
    """A run asking for its receipt within 50 ms is queued before its row is written (one write,
    its final state's, when it ends sooner); one still going then is written before its receipt."""
    requests, call = _run_stream(cluster)
    echo = S.RunWorkflowRequest(workflow_name="echo", input_json='"kept"')
    # No worker: it cannot end within its 20 ms.
    requests.put(S.RunAndWaitStreamRequest(run_id=1, run=echo, receipt_after_ms=20))
    receipt = next(call)
    assert receipt.WhichOneof("answer") == "accepted"
    execution_id = receipt.accepted.execution_id
    stored = "SELECT state, input_json FROM executions WHERE execution_id = ?"
    assert cluster.query(stored, execution_id) == [(S.EXECUTION_STATE_CREATED, '"kept"')]
    cluster.kill_server()  # SIGKILL: what the receipt promised must be on disk
    cluster.restart_server()
    cluster.start_worker("w1")
    final = cluster.client.wait(execution_id, timeout=60)
    assert final.state == S.EXECUTION_STATE_COMPLETED and json.loads(final.output_json)["input"] == "kept"
    # One that ends within its 50 ms: its final state alone answers it, and is what is stored.
    requests, call = _run_stream(cluster)
    requests.put(S.RunAndWaitStreamRequest(run_id=2, run=echo, receipt_after_ms=50))
    requests.put(None)
    answers = list(call)
    assert [a.WhichOneof("answer") for a in answers] in (["finished"], ["accepted", "finished"])
    quick = answers[-1].finished
    assert cluster.query(stored, quick.execution_id) == [(S.EXECUTION_STATE_COMPLETED, '"kept"')]


def test_run_and_wait_stream_refuses_a_read_token_for_the_whole_call(cluster: Cluster):
    token = cluster.client.tenants.create_token("default", "read")
    channel = grpc.insecure_channel(cluster.address)
    stub = control_pb2_grpc.ControlServiceStub(channel)
    run = S.RunAndWaitStreamRequest(run_id=1, run=S.RunWorkflowRequest(workflow_name="echo"))
    with pytest.raises(grpc.RpcError) as refused:
        list(stub.RunAndWaitStream(iter([run]), metadata=[("authorization", f"Bearer {token}")], timeout=10))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "RunAndWaitStream" in refused.value.details()
    channel.close()


def test_runs_waited_from_many_threads_share_one_call_and_each_gets_its_own_result(cluster: Cluster):
    cluster.start_worker("w1", "--capacity", "4")
    client = cluster.client
    results: queue.Queue[object] = queue.Queue()

    def run(n: int) -> None:
        try:
            results.put((n, json.loads(client.run("echo", n, wait=True).output_json)["input"]))
        except BaseException as exc:
            results.put(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    got = [results.get(timeout=60) for _ in threads]
    assert sorted(got) == [(n, n) for n in range(8)]  # type: ignore[type-var]
    with pytest.raises(NotFound, match="nope"):
        client.run("nope", 1, wait=True)  # a refusal raises its error; the call stays usable
    assert json.loads(client.run("echo", "again", wait=True).output_json)["input"] == "again"


def test_a_run_waited_on_the_stream_rides_out_a_server_restart(cluster: Cluster):
    client = cluster.client
    client.run("echo", 0, wait=False)
    outcome: queue.Queue[object] = queue.Queue()

    def run() -> None:
        try:
            outcome.put(client.run("echo", "through", wait=True))  # no worker: it waits
        except BaseException as exc:
            outcome.put(exc)

    threading.Thread(target=run, daemon=True).start()
    eventually(lambda: cluster.query("SELECT count(*) FROM executions")[0][0] == 2)
    cluster.kill_server()
    cluster.restart_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
    cluster.start_worker("w1", wait=False)
    final = outcome.get(timeout=90)
    assert not isinstance(final, BaseException), final
    assert final.state == S.EXECUTION_STATE_COMPLETED and json.loads(final.output_json)["input"] == "through"
    # And the next run opens a new call to the restarted server.
    assert client.run("echo", 2, wait=True).state == S.EXECUTION_STATE_COMPLETED


def test_an_asyncio_run_waited_on_the_stream_rides_out_a_server_restart(cluster: Cluster):
    async def main() -> None:
        async with aio.FluxClient(
            cluster.address, timeout=10, credentials=cluster.credentials(Role.CLIENT)
        ) as c:
            waiting = asyncio.create_task(c.run("echo", "through", wait=True))  # no worker: it waits
            while not cluster.query("SELECT count(*) FROM executions")[0][0]:
                await asyncio.sleep(0.05)
            await asyncio.to_thread(cluster.kill_server)
            await asyncio.to_thread(
                cluster.restart_server, "--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1"
            )
            await asyncio.to_thread(cluster.start_worker, "w1", wait=False)
            final = await asyncio.wait_for(waiting, 90)
            assert final.state == S.EXECUTION_STATE_COMPLETED
            assert json.loads(final.output_json)["input"] == "through"
            assert (await c.run("echo", 2, wait=True)).state == S.EXECUTION_STATE_COMPLETED  # a new call

    asyncio.run(main())


def test_a_run_waited_with_no_server_there_is_unavailable_at_once_from_both_clients():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    with FluxClient(address, timeout=5) as client, pytest.raises(Unavailable, match="cannot reach"):
        client.run("echo", 1, wait=True)

    async def main() -> None:
        async with aio.FluxClient(address, timeout=5) as c:
            with pytest.raises(Unavailable, match="cannot reach"):
                await asyncio.wait_for(c.run("echo", 1, wait=True), 20)  # not a hang

    asyncio.run(main())


def test_a_run_wait_that_times_out_names_the_accepted_execution(cluster: Cluster):
    with pytest.raises(WaitTimedOut) as timed_out:
        cluster.client.run("echo", 1, wait=True, timeout=0.5)  # no worker: it stays queued
    assert timed_out.value.execution.state == S.EXECUTION_STATE_CREATED
    assert cluster.client.get(timed_out.value.execution.execution_id).state == S.EXECUTION_STATE_CREATED


@pytest.mark.backends("sqlite", "postgres")
def test_as_completed_yields_finished_first_then_in_completion_order(cluster: Cluster):
    client = cluster.client
    cluster.start_worker("w1")
    done = client.run("echo", "done", wait=True, timeout=30)
    client.pause_worker("w1")
    pending = client.map("echo", ["a", "b", "c"])  # the only worker is paused: they wait
    ids = [e.execution_id for e in pending]
    seen: queue.Queue[object] = queue.Queue()

    def read() -> None:
        try:
            for execution in client.as_completed([*ids, done.execution_id, ids[0]], timeout=60):
                seen.put(execution)
        except BaseException as exc:
            seen.put(exc)
        seen.put(None)

    threading.Thread(target=read, daemon=True).start()
    first = seen.get(timeout=30)
    assert first.execution_id == done.execution_id and first.state == S.EXECUTION_STATE_COMPLETED
    order = []
    for execution_id in (ids[2], ids[0], ids[1]):
        client.cancel(execution_id)
        execution = seen.get(timeout=30)
        assert not isinstance(execution, BaseException), execution
        order.append(execution.execution_id)
        assert execution.state == S.EXECUTION_STATE_CANCELLED
        assert execution.input_json == ""  # finals leave inputs out
    assert order == [ids[2], ids[0], ids[1]]
    assert seen.get(timeout=30) is None  # each id once, then the end


def test_wait_all_and_map_wait_answer_in_input_order(cluster: Cluster):
    cluster.start_worker("w1", "--capacity", "4")
    finals = cluster.client.map("sleepy", [0.3, 0.0, 0.2, 0.0, 0.1], wait=True, timeout=60)
    assert [f.state for f in finals] == [S.EXECUTION_STATE_COMPLETED] * 5
    again = cluster.client.wait_all(list(reversed(finals)), timeout=30)
    assert [f.execution_id for f in again] == [f.execution_id for f in reversed(finals)]


def test_wait_executions_refuses_unknown_empty_and_oversized_lists(cluster: Cluster):
    client = cluster.client
    with pytest.raises(NotFound, match="feedbeef"):
        list(client.as_completed(["feedbeef"]))
    stub = control(cluster)
    with pytest.raises(grpc.RpcError) as empty:
        list(stub.WaitExecutions(S.WaitExecutionsRequest(), timeout=10))
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "execution_ids" in empty.value.details()
    with pytest.raises(grpc.RpcError) as oversized:
        ids = [f"{n:032x}" for n in range(10_001)]
        list(stub.WaitExecutions(S.WaitExecutionsRequest(execution_ids=ids), timeout=10))
    assert oversized.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "10000" in oversized.value.details()
    with pytest.raises(InvalidArgument, match=r"execution_ids\[1\]"):
        list(client.as_completed(["a" * 32, "x" * 500]))


def test_as_completed_rides_out_a_server_restart(cluster: Cluster):
    client = cluster.client
    ids = [e.execution_id for e in client.map("echo", [1, 2, 3])]  # no worker yet
    seen: queue.Queue[object] = queue.Queue()

    def read() -> None:
        try:
            seen.put([e.execution_id for e in client.as_completed(ids, timeout=90)])
        except BaseException as exc:
            seen.put(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    cluster.kill_server()
    cluster.restart_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
    # Not waiting for it through this process's channel: the reader's retries during the
    # restart left its connection backing off, and a fresh channel here shares it.
    cluster.start_worker("w1", wait=False)
    result = seen.get(timeout=90)
    assert not isinstance(result, BaseException), result
    assert sorted(result) == sorted(ids)


def test_the_asyncio_client_runs_and_waits_on_one_call_from_many_tasks(cluster: Cluster):
    cluster.start_worker("w1", "--capacity", "4")

    async def main() -> None:
        async with aio.FluxClient(
            cluster.address, timeout=10, credentials=cluster.credentials(Role.CLIENT)
        ) as c:
            finals = await asyncio.gather(*(c.run("echo", n, wait=True) for n in range(8)))
            assert [json.loads(f.output_json)["input"] for f in finals] == list(range(8))
            assert all(f.state == S.EXECUTION_STATE_COMPLETED for f in finals)
            with pytest.raises(NotFound, match="nope"):
                await c.run("nope", 1, wait=True)
            # A run cancelled while it waits is only no longer waited for: the call serves the next.
            waiting = asyncio.create_task(c.run("sleepy", 30.0, wait=True))
            # Cancelled once the run is stored, so what is cancelled is the wait, not the submission.
            accepted = "SELECT count(*) FROM executions WHERE workflow_name = 'sleepy'"
            await asyncio.to_thread(eventually, lambda: cluster.query(accepted)[0][0], what="the run stored")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            again = await c.run("echo", "again", wait=True)
            assert json.loads(again.output_json)["input"] == "again"
            calls = c._runs._call
            assert calls is not None and (await c.run("echo", 1, wait=True)) and c._runs._call is calls

    asyncio.run(main())


def test_the_asyncio_client_has_the_same_surface(cluster: Cluster):
    cluster.start_worker("w1", "--capacity", "4")

    async def main() -> None:
        async with aio.FluxClient(
            cluster.address, timeout=10, credentials=cluster.credentials(Role.CLIENT)
        ) as c:
            final = await c.run("echo", {"n": 1}, wait=True, timeout=30)
            assert final.state == S.EXECUTION_STATE_COMPLETED
            assert json.loads(final.output_json)["input"] == {"n": 1}
            accepted = await c.map("echo", list(range(6)))
            seen = [e.execution_id async for e in c.as_completed(accepted, timeout=30)]
            assert sorted(seen) == sorted(e.execution_id for e in accepted)
            ordered = await c.map("echo", list(range(5)), wait=True, timeout=30)
            assert [json.loads(e.output_json)["input"] for e in ordered] == list(range(5))
            states = [u.state async for u in c.watch(final.execution_id)]
            assert states == [S.EXECUTION_STATE_COMPLETED]
            assert (await c.get(final.execution_id)).execution_id == final.execution_id
            assert [w.name for w in (await c.workers()).workers] == ["w1"]
            assert (await c.list_executions(page_size=100)).executions
            assert any(w.name == "echo" for w in (await c.workflows()).workflows)
            await c.pause_worker("w1")
            with pytest.raises(WaitTimedOut) as timed_out:
                await c.run("echo", 2, wait=True, timeout=0.5)
            waiting = timed_out.value.execution
            assert waiting.state == S.EXECUTION_STATE_CREATED
            assert "0/1" in (await c.explain(waiting.execution_id)).summary
            with pytest.raises(WaitTimedOut):
                await c.wait_all([waiting], timeout=0.3)
            await c.resume_worker("w1")
            assert (await c.wait(waiting.execution_id, timeout=30)).state == S.EXECUTION_STATE_COMPLETED
            with pytest.raises(NotFound):
                await c.get("feedbeef")

    asyncio.run(main())
    eventually(lambda: cluster.worker_connected("w1"), what="w1 still connected")
