"""Trivial workflows for the dispatch benchmarks."""

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
