"""Workflows ``python -m bench graphs`` registers on real servers."""

import asyncio
import time

from flux import ExecutionContext, workflow


@workflow
async def graph_step(ctx: ExecutionContext[object]):
    """Returns when its body started (the worker's clock: the same machine as the server); given
    ``{"sleep": s}``, it then runs s seconds more (a dependency still running when its dependent is
    submitted)."""
    started = time.time()
    if isinstance(ctx.input, dict):
        await asyncio.sleep(float(ctx.input.get("sleep", 0)))
    return {"started": started}
