"""Timeouts, retries with backoff, heartbeats and a pending deadline (README: "Work over time")."""

import asyncio
import time

from flux import ExecutionContext, ResourceRequest, Retry, workflow


@workflow.with_options(
    retry=Retry(
        max_attempts=3, initial_delay="300ms", backoff=2.0, jitter=False, retry_on=["ConnectionError"]
    ),
)
async def flaky(ctx: ExecutionContext[None]) -> dict:
    # Resume where the last try stopped: its last heartbeat's details come back as ctx.last_heartbeat.
    ctx.heartbeat({"reached": ctx.attempt})
    if ctx.attempt < 3:
        raise ConnectionResetError("reset")  # a ConnectionError: retried
    return {"attempt": ctx.attempt, "resumed_from": ctx.last_heartbeat}


@workflow.with_options(retry=Retry(max_attempts=5, no_retry_on=["ValueError"]))
async def picky(ctx: ExecutionContext[None]) -> None:
    raise ValueError("bad input: retrying will not help")


@workflow.with_options(timeout="1s", max_attempts=2)
async def slow_async(ctx: ExecutionContext[None]) -> None:
    await asyncio.sleep(60)  # cancelled at its timeout, twice, then FAILED with reason "timeout"


@workflow.with_options(timeout="1s", max_attempts=1)
def slow_sync(ctx: ExecutionContext[None]) -> None:
    time.sleep(60)  # a sync body with a timeout runs in a child process, killed at its timeout


@workflow.with_options(heartbeat_timeout="1s", max_attempts=1)
async def silent(ctx: ExecutionContext[None]) -> None:
    await asyncio.sleep(60)  # never says it is alive: stopped after 1 s, reason "heartbeat_timeout"


@workflow.with_options(heartbeat_timeout="2s")
def beating(ctx: ExecutionContext[int]) -> int:
    deadline, beats = time.monotonic() + ctx.input, 0
    while time.monotonic() < deadline:
        beats += 1
        ctx.heartbeat(beats)  # a tight loop: the worker sends at most one per interval
    return beats


@workflow.with_options(requests=ResourceRequest(cpu=10_000), pending_timeout="1s")
async def unplaceable(ctx: ExecutionContext[None]) -> None:
    pass  # no worker has 10,000 cores: FAILED after 1 s with reason "pending_timeout"
