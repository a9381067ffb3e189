"""Flow control: concurrency per key and a rate limit (docs/guides/flow-control.md)."""

import asyncio
import time

from flux import Concurrency, ExecutionContext, RateLimit, workflow


@workflow.with_options(concurrency=Concurrency(max=1, key="customer"))
async def per_customer(ctx: ExecutionContext[dict]) -> dict:
    # At most one run per customer at a time; other customers' runs go beside it.
    started = time.time()
    await asyncio.sleep(ctx.input.get("seconds", 0.5))
    return {"customer": ctx.input["customer"], "started": started, "ended": time.time()}


@workflow.with_options(rate_limit=RateLimit("5/s"))
async def paced(ctx: ExecutionContext[None]) -> float:
    # At most 5 starts a second, spread evenly (burst 1): returns when this one started.
    return time.time()


@workflow.with_options(limits=["openai"])
async def summarise(ctx: ExecutionContext[dict]) -> dict:
    # Shares the tenant's named limit "openai" (flux limit create openai --concurrency 2)
    # with every other workflow naming it.
    started = time.time()
    await asyncio.sleep(ctx.input.get("seconds", 0.2))
    return {"started": started, "ended": time.time()}


@workflow.with_options(limits=["openai"])
async def translate(ctx: ExecutionContext[dict]) -> dict:
    started = time.time()
    await asyncio.sleep(ctx.input.get("seconds", 0.2))
    return {"started": started, "ended": time.time()}
