"""Arrays with a throttle: one workflow mapped over many inputs, a few at a time (docs/guides/batches.md)."""

import asyncio
import time

from flux import ExecutionContext, workflow


@workflow.with_options(name="shard")
async def shard(ctx: ExecutionContext[dict]) -> dict:
    # One shard of a larger job; client.map runs many of them as one batch, max_concurrent at once.
    started = time.time()
    await asyncio.sleep(ctx.input.get("seconds", 0.2))
    return {"shard": ctx.input["shard"], "started": started, "ended": time.time()}
