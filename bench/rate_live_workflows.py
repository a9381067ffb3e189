"""The workflow of ``python -m bench rate-live``: a rate of 600 a minute, burst 1; the body
returns when it started, the witness the bench counts per window."""

import time

from flux import ExecutionContext, RateLimit, workflow


@workflow.with_options(name="paced_600", rate_limit=RateLimit("600/m"))
async def paced_600(ctx: ExecutionContext[object]) -> float:
    return time.time()
