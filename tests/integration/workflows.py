"""Workflows the integration tests register on real servers."""

import asyncio
import time

from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


def _record(ctx: ExecutionContext, started: float, **extra: object) -> dict:
    return {
        "worker": ctx.worker_name,
        "attempt": ctx.attempt,
        "gpus": list(ctx.assigned_gpus),
        "started": started,
        "ended": time.time(),
        **extra,
    }


@workflow
async def echo(ctx: ExecutionContext[object]):
    return {"input": ctx.input, "worker": ctx.worker_name}


@workflow
async def sleepy(ctx: ExecutionContext[float]):
    started = time.time()
    await asyncio.sleep(ctx.input or 0)
    return _record(ctx, started)


@workflow
def blocking(ctx: ExecutionContext[float]):
    started = time.time()
    time.sleep(ctx.input or 0)
    return _record(ctx, started)


@workflow
async def boom(ctx: ExecutionContext[str]):
    raise RuntimeError(f"boom: {ctx.input}")


@workflow.with_options(name="needs_cpu", requests=ResourceRequest(cpu=2))
async def needs_cpu(ctx: ExecutionContext[float]):
    started = time.time()
    await asyncio.sleep(ctx.input or 0)
    return _record(ctx, started)


@workflow.with_options(name="needs_cpu_8", requests=ResourceRequest.with_cpu(8))
async def needs_cpu_8(ctx: ExecutionContext[None]):
    return _record(ctx, time.time())


@workflow.with_options(name="needs_memory", requests=ResourceRequest.with_memory("12Gi"))
async def needs_memory(ctx: ExecutionContext[None]):
    return _record(ctx, time.time())


@workflow.with_options(name="needs_gpu", requests=ResourceRequest.with_gpu(2))
async def needs_gpu(ctx: ExecutionContext[None]):
    return _record(ctx, time.time())


@workflow.with_options(name="needs_vram", requests=ResourceRequest(gpu=1, gpu_memory="20Gi"))
async def needs_vram(ctx: ExecutionContext[float]):
    started = time.time()
    await asyncio.sleep(ctx.input or 0)
    return _record(ctx, started)


@workflow.with_options(name="needs_vram_100", requests=ResourceRequest(gpu=1, gpu_memory="100Gi"))
async def needs_vram_100(ctx: ExecutionContext[None]):
    return _record(ctx, time.time())


@workflow.with_options(name="needs_disk", requests=ResourceRequest.with_disk("500Gi"))
async def needs_disk(ctx: ExecutionContext[None]):
    return _record(ctx, time.time())


@workflow.with_options(
    name="needs_torch", requests=ResourceRequest(packages=["torch>=2.0.0", "transformers"])
)
async def needs_torch(ctx: ExecutionContext[None]):
    return _record(ctx, time.time())


@workflow.with_options(
    name="trainer", requests=ResourceRequest(cpu=2, memory="1Gi"), affinity={"role": "training"}
)
async def trainer(ctx: ExecutionContext[None]):
    return _record(ctx, time.time())


@workflow.with_options(name="slow_step", requests=ResourceRequest(cpu=1))
async def slow_step(ctx: ExecutionContext[float]):
    started = time.time()
    await asyncio.sleep(ctx.input or 0)
    return _record(ctx, started)


@workflow
async def huge_output(ctx: ExecutionContext[int]):
    return "x" * (ctx.input or 0)


@workflow
async def nan_output(ctx: ExecutionContext[None]):
    return float("nan")


@workflow.with_options(name="holds_gpu", requests=ResourceRequest(gpu=1))
async def holds_gpu(ctx: ExecutionContext[float]):
    # Holds one GPU for ctx.input seconds: a reservation that a busy test machine's load cannot block.
    started = time.time()
    await asyncio.sleep(ctx.input or 0)
    return _record(ctx, started)
