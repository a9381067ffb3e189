"""A workflow of the preemption tests that finishes even when told to stop: its result comes late."""

import asyncio

from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="stubborn_step", requests=ResourceRequest(cpu=1))
async def stubborn_step(ctx: ExecutionContext[float]):
    """Sleeps ``input`` seconds; stopped, it still returns (after a moment), as work that cannot
    be interrupted would: its worker then reports a result the server must refuse."""
    try:
        await asyncio.sleep(ctx.input or 0)
    except asyncio.CancelledError:
        await asyncio.sleep(0.2)
        return {"finished": "anyway", "attempt": ctx.attempt}
    return {"finished": "in time", "attempt": ctx.attempt}


@workflow.with_options(name="lingering_step", requests=ResourceRequest(cpu=1))
async def lingering_step(ctx: ExecutionContext[float]):
    """Sleeps ``input`` seconds; stopped, it lingers 4 s more before it returns: a preemption
    that takes that long to finish, for a test to kill a server in the middle of."""
    try:
        await asyncio.sleep(ctx.input or 0)
    except asyncio.CancelledError:
        await asyncio.sleep(4)
        return {"finished": "after lingering", "attempt": ctx.attempt}
    return {"finished": "in time", "attempt": ctx.attempt}
