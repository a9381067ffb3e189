"""Workflows the dependency tests register: a gate the test opens (a file), and bodies that
report what they saw of their dependencies (ctx.upstream) and when they started."""

import asyncio
import os
import time

from flux import ExecutionContext, Retry, workflow


@workflow
async def gated(ctx: ExecutionContext[dict]):
    """Waits until the file ``ctx.input["gate"]`` exists, then returns its value and when it ended."""
    gate = ctx.input["gate"]
    deadline = time.time() + 60
    while not os.path.exists(gate) and time.time() < deadline:
        await asyncio.sleep(0.02)
    return {"value": ctx.input.get("value"), "ended": time.time()}


@workflow
async def downstream(ctx: ExecutionContext[object]):
    """What it saw: its upstream outputs and when it started."""
    return {"upstream": ctx.upstream, "started": time.time(), "input": ctx.input}


@workflow.with_options(retry=Retry(max_attempts=1))
async def broken(ctx: ExecutionContext[object]):
    raise RuntimeError("broken on purpose")
