"""Workflows of the prefetch tests: each body notes when it started and ended, on its worker, so a
test can count how many ran at once there, and in what order they started. A body given
``until`` (a path) runs until that file exists."""

import asyncio
import time
from pathlib import Path

from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


async def _timed(ctx: ExecutionContext[dict]) -> dict:
    started = time.time()
    log = ctx.input.get("log")
    if log:  # a line per body started: an execution that never ran has none
        with Path(log).open("a") as out:
            out.write(f"{ctx.execution_id} {ctx.worker_name}\n")
    await asyncio.sleep(ctx.input.get("seconds", 0))
    until = ctx.input.get("until")
    while until and not Path(until).exists():  # a body that runs until the test lets it end
        await asyncio.sleep(0.02)
    return {"worker": ctx.worker_name, "started": started, "ended": time.time(), "tag": ctx.input.get("tag")}


@workflow.with_options(name="one_core", requests=ResourceRequest(cpu=1))
async def one_core(ctx: ExecutionContext[dict]):
    return await _timed(ctx)


@workflow.with_options(name="one_core_urgent", requests=ResourceRequest(cpu=1), priority=10)
async def one_core_urgent(ctx: ExecutionContext[dict]):
    return await _timed(ctx)
