"""Batched claims and results through a real server, on both worker transports.

The worker runs in this process (its own thread and loop) over a transport that
counts the calls it makes, so the test sees which calls reached the server; the
server, gateway and store are the real ones of the cluster fixture.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from flux.errors import Unimplemented
from flux.security import Credentials, Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, resources_pb2, worker_pb2, worker_pb2_grpc
from flux.worker.grpc_transport import GrpcTransport
from flux.worker.probe import ResourceProbe
from flux.worker.runtime import WorkerConfig, WorkerRuntime
from flux.worker.sse_transport import SseTransport
from flux.worker.transport import WorkerTransport

pytestmark = pytest.mark.timeout(120)

BURST = 40
COMPLETED = control_pb2.ExecutionState.Value("EXECUTION_STATE_COMPLETED")


def counting(base: type[WorkerTransport]) -> type[WorkerTransport]:
    """``base`` that counts its claim and complete calls (items, for the batched ones).

    ``single_calls`` makes it a worker from before the batched calls: it never sends one.
    """

    class Counting(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, single_calls: bool = False, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.calls: Counter[str] = Counter()
            self.single_calls = single_calls

        async def claim(self, *args: Any) -> None:
            self.calls["claim"] += 1
            await super().claim(*args)

        async def complete(self, *args: Any) -> None:
            self.calls["complete"] += 1
            await super().complete(*args)

        async def claim_batch(self, name: str, token: str, items: Sequence[Any], **kwargs: Any) -> Any:
            if self.single_calls:
                raise Unimplemented("a worker from before the batched calls")
            answers = await super().claim_batch(name, token, items, **kwargs)
            self.calls["claim_batch"] += 1
            self.calls["claimed in batches"] += len(items)
            return answers

        async def complete_batch(self, name: str, token: str, items: Sequence[Any], resources: Any) -> Any:
            if self.single_calls:
                raise Unimplemented("a worker from before the batched calls")
            answers = await super().complete_batch(name, token, items, resources)
            self.calls["complete_batch"] += 1
            self.calls["completed in batches"] += len(items)
            self.calls["claimed with results"] += sum(item.claim for item in items)
            return answers

    return Counting


def transport_for(cluster: Cluster, single_calls: bool = False, address: str | None = None) -> Any:
    credentials = cluster.credentials(Role.WORKER)
    if address is not None:  # the old server below: plaintext, and it holds the token itself
        return counting(GrpcTransport)([address], single_calls=single_calls)
    if cluster.transport == "sse":
        return counting(SseTransport)(
            [cluster.gateway_url], credentials=credentials, single_calls=single_calls
        )
    return counting(GrpcTransport)([cluster.address], credentials, single_calls=single_calls)


class OldServer(worker_pb2_grpc.WorkerServiceServicer):
    """A server from before the batched calls, in front of the real one.

    It forwards the calls it knows; ClaimBatch and CompleteBatch are the generated base
    class's, which answer UNIMPLEMENTED, as a server built before them does.
    """

    def __init__(self, address: str, credentials: Credentials):
        self.channel = credentials.aio_channel(address)
        self.stub = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.metadata = credentials.metadata

    async def _forward(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await getattr(self.stub, method)(request, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")

    async def Register(self, request, context):  # type: ignore[no-untyped-def]
        return await self._forward("Register", request, context)

    async def ReportResources(self, request, context):  # type: ignore[no-untyped-def]
        return await self._forward("ReportResources", request, context)

    async def Claim(self, request, context):  # type: ignore[no-untyped-def]
        return await self._forward("Claim", request, context)

    async def Complete(self, request, context):  # type: ignore[no-untyped-def]
        return await self._forward("Complete", request, context)

    async def Release(self, request, context):  # type: ignore[no-untyped-def]
        return await self._forward("Release", request, context)

    async def GetWorkflowSource(self, request, context):  # type: ignore[no-untyped-def]
        return await self._forward("GetWorkflowSource", request, context)

    async def Connect(self, request, context):  # type: ignore[no-untyped-def]
        async for event in self.stub.Connect(request, metadata=self.metadata):
            if event.WhichOneof("event") == "connected":  # nor does it take a claim inside a result
                event.connected.claims_with_results = False
            yield event


@contextmanager
def in_process_worker(
    cluster: Cluster, name: str, transport: Any, old_server: bool = False
) -> Iterator[WorkerRuntime]:
    """A worker on its own loop in a thread; drained and stopped on exit."""
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        server = None
        if old_server:
            server = grpc.aio.server()
            worker_pb2_grpc.add_WorkerServiceServicer_to_server(
                OldServer(cluster.address, cluster.credentials(Role.WORKER)), server
            )
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            transport._addresses = [f"127.0.0.1:{port}"]
        config = WorkerConfig(name, capacity=BURST, work_dir=Path(cluster.workdir) / "in-process")
        runtime = WorkerRuntime(config, transport, ResourceProbe(gpu_readers=[]))
        state["runtime"], state["loop"] = runtime, asyncio.get_running_loop()
        started.set()
        try:
            await runtime.run()
        finally:
            if server is not None:
                await server.stop(None)

    thread = threading.Thread(target=lambda: state.setdefault("error", asyncio.run(main())), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        eventually(lambda: cluster.worker_connected(name), what=f"worker {name} to connect")
        yield state["runtime"]
    finally:
        state["loop"].call_soon_threadsafe(state["runtime"].stop)
        thread.join(30)


def burst(cluster: Cluster, n: int = BURST) -> list[control_pb2.Execution]:
    ids = [cluster.run("echo", i, wait=False).execution_id for i in range(n)]
    return cluster.wait_all(ids)


def assert_all_completed(done: list[control_pb2.Execution], worker: str) -> None:
    assert [e.state for e in done] == [COMPLETED] * len(done)
    assert [json.loads(e.output_json) for e in done] == [
        {"input": i, "worker": worker} for i in range(len(done))
    ]


def test_a_burst_is_claimed_and_completed_in_batched_calls(cluster: Cluster) -> None:
    transport = transport_for(cluster)
    with in_process_worker(cluster, "batcher", transport):
        done = burst(cluster)
        # Nothing left behind: the worker holds nothing once every result is in.
        [worker] = [w for w in cluster.client.workers().workers if w.name == "batcher"]
        assert worker.active_executions == 0
        streamed = getattr(transport, "_streamed", None)
    assert_all_completed(done, "batcher")
    calls = transport.calls
    assert (calls["claim"], calls["complete"]) == (0, 0)  # everything went in batches
    # Over gRPC a claim may travel inside its result (a body that ended before its claim was due);
    # the HTTP routes take none so.
    assert calls["claimed in batches"] + calls["claimed with results"] >= BURST
    assert calls["completed in batches"] >= BURST and calls["complete_batch"] >= 1
    if isinstance(transport, GrpcTransport):  # and they went as messages on the WorkerCalls stream
        assert streamed is True
    else:
        assert calls["claimed with results"] == 0 and calls["claim_batch"] >= 1


def test_a_worker_with_single_calls_still_works_beside_a_batching_one(cluster: Cluster) -> None:
    old, new = transport_for(cluster, single_calls=True), transport_for(cluster)
    with in_process_worker(cluster, "old", old), in_process_worker(cluster, "new", new):
        done = burst(cluster)
    assert [e.state for e in done] == [COMPLETED] * BURST
    ran_on = Counter(json.loads(e.output_json)["worker"] for e in done)
    assert sum(ran_on.values()) == BURST
    assert (old.calls["claim"], old.calls["complete"]) == (ran_on["old"], ran_on["old"])
    assert (old.calls["claim_batch"], old.calls["complete_batch"]) == (0, 0)
    assert (new.calls["claim"], new.calls["complete"]) == (0, 0)


@pytest.mark.transports("grpc")
def test_a_server_without_batched_calls_gets_single_calls(cluster: Cluster) -> None:
    transport = transport_for(cluster, address="127.0.0.1:0")
    with in_process_worker(cluster, "fallback", transport, old_server=True):
        done = burst(cluster, 10)
        eventually(lambda: transport.calls["complete"] == 10, what="every result sent")
    assert_all_completed(done, "fallback")
    # Each batched call was answered UNIMPLEMENTED (once per stream), then single calls carried it all.
    assert (transport.calls["claim"], transport.calls["complete"]) == (10, 10)
    assert (transport.calls["claim_batch"], transport.calls["complete_batch"]) == (0, 0)


@pytest.mark.transports("sse")
def test_the_batched_routes_answer_per_item_with_the_single_routes_auth(cluster: Cluster) -> None:
    from tests.integration.test_gateway import FREE, authorized, register

    with authorized(cluster, cluster.gateway_url) as http:
        token = register(http, "holder", FREE)
        auth = {"X-Flux-Session": token}
        items = [{"execution_id": "nope", "generation": 1}, {"execution_id": "x" * 129, "generation": "2"}]
        answer = http.post("/workers/holder/claims", json=items, headers=auth)
        assert answer.status_code == 200, answer.text
        first, second = answer.json()
        assert (first["execution_id"], first["ok"], first["code"]) == ("nope", False, "NOT_FOUND")
        assert (second["ok"], second["code"]) == (False, "INVALID_ARGUMENT")
        assert "execution_id" in second["message"]
        cases = [
            # (path, body, headers, status, code): the same auth and body rules as /claim and /complete
            ("claims", items, None, 401, "UNAUTHENTICATED"),
            ("claims", items, {"X-Flux-Session": "wrong"}, 403, "PERMISSION_DENIED"),
            ("claims", [], auth, 422, "INVALID_ARGUMENT"),
            ("claims", {"execution_id": "e", "generation": 1}, auth, 422, "INVALID_ARGUMENT"),
            ("claims", [{"execution_id": "e", "generation": "one"}], auth, 422, "INVALID_ARGUMENT"),
            ("completions", [{"execution_id": "e", "generation": 1}], auth, 422, "INVALID_ARGUMENT"),
            (
                "completions",
                [{"execution_id": "e", "generation": 1, "name": "x"}],
                auth,
                422,
                "INVALID_ARGUMENT",
            ),
        ]
        for path, body, headers, status, code in cases:
            response = http.post(f"/workers/holder/{path}", json=body, headers=headers)
            assert (response.status_code, response.json()["error"]["code"]) == (status, code), (path, body)
        missing = http.post(
            "/workers/holder/completions", json=[{"execution_id": "e", "generation": 1}], headers=auth
        )
        assert "items[0].result is missing" in missing.json()["error"]["message"]
        results = [{"execution_id": "nope", "generation": 1, "output_json": "1", "resources": FREE}]
        answer = http.post("/workers/holder/completions", json=results, headers=auth)
        assert answer.status_code == 200, answer.text
        assert [(a["ok"], a["code"]) for a in answer.json()] == [(False, "NOT_FOUND")]


@pytest.mark.transports("grpc")
def test_the_calls_stream_answers_each_call_under_its_id_as_the_unary_call_would(cluster: Cluster) -> None:
    channel = cluster.channel(Role.WORKER)
    stub = worker_pb2_grpc.WorkerServiceStub(channel)
    free = resources_pb2.WorkerResources(
        cpu_total=4, cpu_available=4, memory_total=8 << 30, memory_available=8 << 30
    )
    token = stub.Register(worker_pb2.RegisterRequest(name="raw", resources=free, capacity=8)).session_token
    events = stub.Connect(worker_pb2.ConnectRequest(name="raw", session_token=token), timeout=30)
    assert next(events).WhichOneof("event") == "connected"
    ids = [cluster.run("echo", i, wait=False).execution_id for i in range(3)]
    dispatched = [next(events).execution_scheduled for _ in ids]
    claims = worker_pb2.ClaimBatchRequest(
        name="raw",
        session_token=token,
        items=[worker_pb2.ClaimItem(execution_id=d.execution_id, generation=d.generation) for d in dispatched]
        + [worker_pb2.ClaimItem(execution_id="nope", generation=1)],
    )
    results = worker_pb2.CompleteBatchRequest(name="raw", session_token=token)
    for d in dispatched:
        results.items.add(execution_id=d.execution_id, generation=d.generation, output_json=d.input_json)
    stolen = worker_pb2.ClaimBatchRequest(name="raw", session_token="wrong", items=claims.items[:1])
    calls = [
        worker_pb2.WorkerCallsRequest(call_id=7, claims=claims),
        worker_pb2.WorkerCallsRequest(call_id=8, claims=stolen),
        worker_pb2.WorkerCallsRequest(call_id=9),
    ]
    answers = {a.call_id: a for a in stub.WorkerCalls(iter(calls), timeout=30)}
    assert [(x.ok, x.code) for x in answers[7].claims.answers] == [(True, "")] * 3 + [(False, "NOT_FOUND")]
    assert answers[8].refused.code == "PERMISSION_DENIED"
    assert (answers[9].refused.code, answers[9].refused.message) == (
        "INVALID_ARGUMENT",
        "call is empty: set claims or completions",
    )
    # Results on a second stream: committed before the answer, as CompleteBatch's are.
    [done] = stub.WorkerCalls(
        iter([worker_pb2.WorkerCallsRequest(call_id=1, completions=results)]), timeout=30
    )
    assert [x.ok for x in done.completions.answers] == [True] * 3
    finals = [cluster.client.get(i) for i in ids]
    assert [(f.state, json.loads(f.output_json)) for f in finals] == [(COMPLETED, i) for i in range(3)]
    events.cancel()
    channel.close()


@pytest.mark.transports("grpc")
def test_the_calls_stream_refuses_a_caller_without_the_worker_token_and_malformed_bytes(
    cluster: Cluster,
) -> None:
    anonymous = grpc.insecure_channel(cluster.address)
    stub = worker_pb2_grpc.WorkerServiceStub(anonymous)
    with pytest.raises(grpc.RpcError) as refused:
        list(stub.WorkerCalls(iter([worker_pb2.WorkerCallsRequest(call_id=1)]), timeout=10))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    anonymous.close()
    channel = cluster.channel(Role.WORKER)
    raw = channel.stream_stream("/flux.v1.WorkerService/WorkerCalls")  # bytes in, bytes out
    with pytest.raises(grpc.RpcError) as malformed:
        list(raw(iter([b"\xff\xff\xff"]), timeout=10))
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid protobuf message" in (malformed.value.details() or "")
    channel.close()
