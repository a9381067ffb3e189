"""Issue 40: the KEDA port answers without a token, so what a caller can cost is bounded.

A real server in this process (``start_server``: gRPC core and ``--keda-port`` on
127.0.0.1:0, SQLite), so the pool book's counters can be read: each test reproduces a
finding of the review and fails without its fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from flux.dispatcher.state import pools as pool_book
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.keda import externalscaler_pb2 as pb
from flux.keda import externalscaler_pb2_grpc as pb_grpc
from flux.matching.pools import parse_pools
from flux.server.serve import RunningServer, ServerConfig, start_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

POOLS = [
    {"name": "gpu", "resources": {"cpu": 4, "gpu": 1}, "capacity": 1},
    {"name": "secret-a100", "labels": {"kind": "a100"}, "resources": {"cpu": 8}},
]


@asynccontextmanager
async def keda_server(tmp_path: Path, **config: object) -> AsyncIterator[tuple[RunningServer, str]]:
    running = await start_server(
        ServerConfig(
            host="127.0.0.1", grpc_port=0, db=str(tmp_path / "flux.db"), http_port=None, keda_port=0,
            **config,  # type: ignore[arg-type]
        )
    )  # fmt: skip
    try:
        d = running.dispatcher
        await d.pools.apply(parse_pools(POOLS))
        declared = WorkflowRecord("train", 0, "", "main", ResourceRequest(gpu=1), {}, 3)
        await d.register_workflows("train.py", "# train\n", [declared])
        yield running, f"127.0.0.1:{running.keda_port}"
    finally:
        await running.stop(0)


def ref(pool: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="so", namespace="ns", scalerMetadata={"pool": pool})


async def refused(call: Callable[[], Awaitable[object]]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call()
    return caught.value


async def open_streams(stub: pb_grpc.ExternalScalerStub, pool: str, n: int) -> list:  # type: ignore[type-arg]
    """``n`` open StreamIsActive calls, each past its first answer."""
    calls = [stub.StreamIsActive(ref(pool)) for _ in range(n)]
    firsts = await asyncio.wait_for(asyncio.gather(*(call.read() for call in calls)), 20)
    assert all(first.result is False for first in firsts)
    return calls


async def admitted_once_freed(stub: pb_grpc.ExternalScalerStub, pool: str, within: float = 20.0):  # type: ignore[no-untyped-def]
    """A stream opened once the server has seen a cancelled one go: refused (the place not yet
    released) until then, retried for up to ``within`` seconds; a loaded host may take a while."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        call = stub.StreamIsActive(ref(pool))
        try:
            first = await asyncio.wait_for(call.read(), 20)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)
            continue
        assert first.result is False
        return call


@pytest.mark.parametrize(
    ("caps", "flag"),
    [
        ({"keda_max_streams": 3, "keda_max_streams_per_peer": 10}, "--keda-max-streams 3"),
        ({"keda_max_streams": 10, "keda_max_streams_per_peer": 3}, "--keda-max-streams-per-peer 3"),
    ],
    ids=["total", "per peer"],
)
async def test_streams_past_the_cap_are_refused_and_a_closed_one_frees_its_place(
    tmp_path: Path, caps: dict[str, int], flag: str
) -> None:
    async with keda_server(tmp_path, **caps) as (_, address), grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        held = await open_streams(stub, "gpu", 3)
        error = await refused(stub.StreamIsActive(ref("gpu")).read)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert flag in error.details() and "raise" in error.details(), error.details()
        held.pop().cancel()
        held.append(await admitted_once_freed(stub, "gpu"))
        for call in held:
            call.cancel()


async def test_an_unknown_pool_is_answered_from_memory_and_names_no_other_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The declarations were just read: the slow re-read is not due during this test.
    monkeypatch.setattr(pool_book, "RELOAD", 3600.0)
    async with keda_server(tmp_path) as (running, address), grpc.aio.insecure_channel(address) as channel:
        stub, pools = pb_grpc.ExternalScalerStub(channel), running.dispatcher.pools
        reads, computations = pools.reads, pools.computations
        calls = [
            lambda: stub.IsActive(ref("ghost")),
            lambda: stub.GetMetricSpec(ref("ghost")),
            lambda: stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref("ghost"))),
            lambda: stub.StreamIsActive(ref("ghost")).read(),
        ]
        for _ in range(25):
            for call in calls:
                error = await refused(call)
                assert error.code() == grpc.StatusCode.NOT_FOUND
                assert "'ghost'" in error.details()
                assert "gpu" not in error.details() and "secret-a100" not in error.details()
        assert (pools.reads, pools.computations) == (reads, computations)


async def test_many_streams_cost_one_demand_computation_per_change(tmp_path: Path) -> None:
    caps = {"keda_max_streams": 500, "keda_max_streams_per_peer": 500}
    async with (
        keda_server(tmp_path, **caps) as (running, address),
        grpc.aio.insecure_channel(address) as channel,
    ):
        stub, d = pb_grpc.ExternalScalerStub(channel), running.dispatcher
        pools = d.pools
        first = await open_streams(stub, "gpu", 1)
        opened = pools.computations
        # Opening more streams on a watched pool answers from the book: no computation each.
        calls = first + await open_streams(stub, "gpu", 299)
        assert pools.computations - opened <= 1

        before = (pools.computations, pools.recomputations)
        await asyncio.gather(*(d.submit("train", "") for _ in range(20)))
        pushes = await asyncio.wait_for(asyncio.gather(*(call.read() for call in calls)), 20)
        assert all(push.result is True for push in pushes)
        # More work on an active pool: recomputed, but no stream's answer changed, so none is woken.
        for _ in range(5):
            await asyncio.gather(*(d.submit("train", "") for _ in range(20)))
            await asyncio.sleep(pool_book.MIN_INTERVAL * 2)
        computed = pools.computations - before[0]
        recomputed = pools.recomputations - before[1]
        assert computed == recomputed, "a stream computed demand itself"
        assert 1 <= recomputed <= 6, recomputed  # one per burst at most, not one per stream
        for call in calls:
            call.cancel()
