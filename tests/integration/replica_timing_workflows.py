"""Workflows for tests/integration/test_replicas_over_time.py."""

from flux import ExecutionContext, ResourceRequest, Retry, workflow


@workflow.with_options(requests=ResourceRequest(cpu=10_000), pending_timeout="4s")
async def stranded(ctx: ExecutionContext[None]) -> None:
    pass  # no worker has 10,000 cores: FAILED 4 s after its submission, reason pending_timeout


@workflow.with_options(
    retry=Retry(max_attempts=3, initial_delay="4s", jitter=False, retry_on=["ConnectionError"])
)
async def once_flaky(ctx: ExecutionContext[None]) -> int:
    if ctx.attempt == 1:
        raise ConnectionResetError("the first try fails")
    return ctx.attempt
