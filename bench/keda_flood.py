"""``python -m bench keda-flood`` (or ``python -m bench.keda_flood``): what open KEDA streams cost (issue 40).

A security review held 1,000 and 3,000 ``StreamIsActive`` streams on the
KEDA port (no token needed) and measured the submissions a server took:
1,310/s with none, 47/s with 1,000, 17/s with 3,000. Every demand
recomputation (up to one per 10 ms) woke every stream.

Here: one real ``flux start server`` on loopback (``--keda-port``, SQLite,
``--no-http``), one declared GPU pool and ``PENDING`` executions only that
pool could run (no worker: they stay pending, so every submission changes
the demand). Then ``SUBMITTERS`` concurrent submitters (``RunWorkflow``, one
call each in flight, over their own channels) for ``SECONDS``:

- ``none``: no stream held;
- ``streams``: ``STREAMS`` streams held on the pool, each past its first
  answer, from a process of their own (``CHANNELS`` connections, so the
  bench's own measuring is not slowed by them). The caps are raised for this
  (``--keda-max-streams``, ``--keda-max-streams-per-peer``): the point is the
  cost per stream, which the default caps would hide.

``ratio`` is ``streams / none``; the target is >= 0.9 (within 10 %). The
``streams`` round runs second, over the pending the first one added.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from bench.common import write
from flux.keda import externalscaler_pb2 as pb
from flux.keda import externalscaler_pb2_grpc as pb_grpc
from flux.security import Role
from flux.testing import Cluster, plain
from flux.v1 import control_pb2, control_pb2_grpc

PENDING = int(os.environ.get("BENCH_KEDA_PENDING", "10000"))
SUBMITTERS = 8
SECONDS = float(os.environ.get("BENCH_KEDA_SECONDS", "5"))
STREAMS = int(os.environ.get("BENCH_KEDA_STREAMS", "3000"))
CHANNELS = 30  # 100 streams per connection
BATCH = 250

WORKFLOW = """
from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="needs_gpu", requests=ResourceRequest(gpu=1))
async def needs_gpu(ctx: ExecutionContext[None]):
    return None
"""


# ------------------------------------------------------------------ the streams (own process)


def _hold(address: str, count: int, ready: Any, stop: Any, opened: Any) -> None:
    async def hold() -> None:
        channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
        ref = pb.ScaledObjectRef(name="flood", namespace="bench", scalerMetadata={"pool": "gpu"})
        calls: list[Any] = []
        failures: set[str] = set()
        # In batches, each past its first answer: thousands of calls started at once in one client
        # process see some CANCELLED by grpc before they reach the server (no server log has them).
        while len(calls) < count:
            batch = [
                pb_grpc.ExternalScalerStub(channels[(len(calls) + i) % CHANNELS]).StreamIsActive(ref)
                for i in range(min(BATCH, count - len(calls)))
            ]
            firsts = await asyncio.gather(*(call.read() for call in batch), return_exceptions=True)
            calls += [
                call
                for call, first in zip(batch, firsts, strict=True)
                if isinstance(first, pb.IsActiveResponse)
            ]
            failures |= {repr(f)[:300] for f in firsts if not isinstance(f, pb.IsActiveResponse)}
            if len(failures) > 0 and len(calls) == 0:
                break
        opened.value = len(calls)
        if failures:
            print(f"some streams were refused and opened again: {sorted(failures)[:3]}", flush=True)
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for call in calls:
            call.cancel()
        for channel in channels:
            await channel.close()

    asyncio.run(hold())


# ------------------------------------------------------------------ submitting


async def _submit(address: str, token: str, count: int | None, seconds: float | None) -> tuple[int, float]:
    """``SUBMITTERS`` submitters: ``count`` submissions in all (bulk, to fill), or as many as
    ``seconds`` allow; returns (submitted, elapsed)."""
    metadata = (("authorization", f"Bearer {token}"),)
    channels = [grpc.aio.insecure_channel(address) for _ in range(SUBMITTERS)]
    done = 0
    started = time.perf_counter()
    deadline = started + (seconds or 0.0)
    try:
        stubs = [control_pb2_grpc.ControlServiceStub(channel) for channel in channels]

        async def submitter(stub: control_pb2_grpc.ControlServiceStub) -> None:
            nonlocal done
            if count is not None:  # filling: chunks of 500, dealt out
                while done < count:
                    size = min(500, count - done)
                    done += size
                    request = control_pb2.RunWorkflowsRequest(
                        workflow_name="needs_gpu", input_json=["1"] * size
                    )
                    await stub.RunWorkflows(request, metadata=metadata)
                return
            request = control_pb2.RunWorkflowRequest(workflow_name="needs_gpu", input_json="1")
            while time.perf_counter() < deadline:
                await stub.RunWorkflow(request, metadata=metadata)
                done += 1

        await asyncio.gather(*(submitter(stub) for stub in stubs))
    finally:
        for channel in channels:
            await channel.close()
    return done, time.perf_counter() - started


def _rate(address: str, token: str) -> float:
    submitted, elapsed = asyncio.run(_submit(address, token, None, SECONDS))
    return round(submitted / elapsed, 1)


def main() -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="flux-bench-keda-") as tmp:
        workdir = Path(tmp)
        (workdir / "pool_workflows.py").write_text(WORKFLOW)
        (workdir / "pools.json").write_text(
            json.dumps({"pools": [{"name": "gpu", "resources": {"cpu": 4, "gpu": 1}}]})
        )
        cluster = Cluster(workdir, "grpc")
        caps = str(STREAMS + 100)
        try:
            cluster.start_server(
                "--keda-port", "0", "--no-http", "--keda-max-streams", caps, "--keda-max-streams-per-peer", caps
            )  # fmt: skip
            assert cluster.server is not None and cluster.server.stdout is not None
            keda_address = plain(cluster.server.stdout.readline()).rsplit(" on ", 1)[1].split(" ", 1)[0]
            cluster.register(workdir / "pool_workflows.py")
            applied = cluster.flux("pool", "apply", str(workdir / "pools.json"))
            assert applied.returncode == 0, applied.stderr
            token = cluster.token(Role.CLIENT)
            asyncio.run(_submit(cluster.address, token, PENDING, None))

            none = _rate(cluster.address, token)
            context = multiprocessing.get_context("spawn")
            ready, stop, opened = context.Event(), context.Event(), context.Value("i", 0)
            holder = context.Process(target=_hold, args=(keda_address, STREAMS, ready, stop, opened))
            holder.start()
            try:
                assert ready.wait(120), "the streams did not open"
                assert opened.value == STREAMS, f"{opened.value} of {STREAMS} streams opened"
                streams = _rate(cluster.address, token)
            finally:
                stop.set()
                holder.join(30)
                if holder.is_alive():
                    holder.kill()
        finally:
            cluster.close()
    result = {
        "pending_before": PENDING,
        "submitters": SUBMITTERS,
        "seconds_per_round": SECONDS,
        "streams_held": STREAMS,
        "submissions_per_second": {"none": none, "streams": streams},
        "ratio": round(streams / none, 3),
        "target_ratio": 0.9,
    }
    write("keda-flood", result)
    return result


if __name__ == "__main__":
    main()
