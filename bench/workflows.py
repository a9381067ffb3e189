"""Trivial workflows for the dispatch benchmarks."""

import time

from flux import ExecutionContext, workflow


@workflow
async def noop(ctx: ExecutionContext[object]):
    return ctx.input


@workflow
async def stamp(ctx: ExecutionContext[object]):
    # When the body started, for submit -> start latency (same machine, same clock).
    return time.time()
