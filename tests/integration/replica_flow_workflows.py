"""Workflows for tests/integration/test_replica_flow.py."""

import time

from flux import ExecutionContext, RateLimit, workflow


@workflow.with_options(rate_limit=RateLimit("2/s"))
async def two_a_second(ctx: ExecutionContext[None]) -> float:
    return time.time()  # when the body started
