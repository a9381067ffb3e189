"""The workflow of ``python -m bench timers``' end-to-end part: its body sleeps far past its timeout."""

import asyncio

from flux import ExecutionContext, Retry, workflow


# Timeout 1 s, one attempt, a body of 30 s: the attempt ends only when the server's timeout timer
# fires and the worker hands the stopped attempt back (FAILED, reason timeout). A timer that never
# fired would let the body finish: COMPLETED, counted as missed.
@workflow.with_options(name="overruns", timeout="1s", retry=Retry(max_attempts=1))
async def overruns(ctx: ExecutionContext[object]):
    await asyncio.sleep(30)
    return ctx.input
