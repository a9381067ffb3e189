"""Trivial workflows for the dispatch benchmarks."""

import asyncio
import time

from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow
async def noop(ctx: ExecutionContext[object]):
    return ctx.input


@workflow
async def stamp(ctx: ExecutionContext[object]):
    # When the body started, for submit -> start latency (same machine, same clock).
    return time.time()


@workflow.with_options(name="waits_for_pool", affinity={"pool": "reserved"})
async def waits_for_pool(ctx: ExecutionContext[object]):
    # No simulated worker carries pool=reserved: the dashboard bench's queue stays put.
    return ctx.input


@workflow.with_options(name="waits_for_gpus", requests=ResourceRequest(gpu=8))
async def waits_for_gpus(ctx: ExecutionContext[object]):
    # More GPUs than any simulated worker has: a second requirement shape in the queue.
    return ctx.input


@workflow.with_options(name="holds_a_core", requests=ResourceRequest(cpu=1))
async def holds_a_core(ctx: ExecutionContext[float]):
    # Borrowed work in the reclaim bench: sleeps until preempted (or ``input`` seconds pass).
    await asyncio.sleep(ctx.input or 0)
    return ctx.input


@workflow.with_options(name="stamp_a_core", requests=ResourceRequest(cpu=1))
async def stamp_a_core(ctx: ExecutionContext[object]):
    # The reclaiming tenant's work: when its body started, on the submitter's clock (same machine).
    return time.time()
