"""The workflows a chaos run submits; registered with its cluster, run by its workers.

Every body that runs leaves a marker file ``<markers>/<worker>/<execution_id>``
holding its pid and requested cores while it runs (removed in ``finally``), so
the run can count what each worker process really runs, apart from what the
server believes. ``markers`` comes in the input. Each returns the attempt and
worker it ran as, so the stored record can be checked against the run that
produced it. The bodies are async: a cancellation or a lost claim stops them.
"""

import asyncio
import contextlib
import os
import time
from pathlib import Path

from flux import Concurrency, ExecutionContext, RateLimit, Retry, workflow
from flux.domain.resource_request import ResourceRequest


class _Running:
    """The marker of one body while it runs."""

    def __init__(self, ctx: ExecutionContext, cpu: int):
        folder = Path(ctx.input["markers"]) / ctx.worker_name
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / ctx.execution_id
        self.path.write_text(f"{os.getpid()} {cpu}\n")

    def __enter__(self) -> "_Running":
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _result(ctx: ExecutionContext) -> dict:
    return {"attempt": ctx.attempt, "worker": ctx.worker_name, "execution_id": ctx.execution_id}


@workflow.with_options(name="chaos_echo", requests=ResourceRequest(cpu=1))
async def chaos_echo(ctx: ExecutionContext[dict]):
    with _Running(ctx, 1):
        return _result(ctx)


@workflow.with_options(name="chaos_after", requests=ResourceRequest(cpu=1))
async def chaos_after(ctx: ExecutionContext[dict]):
    """A dependent (the load's ``dependent`` shape): says when its body started."""
    started = time.time()
    with _Running(ctx, 1):
        return {**_result(ctx), "started": started}


@workflow.with_options(name="chaos_sleep", requests=ResourceRequest(cpu=1))
async def chaos_sleep(ctx: ExecutionContext[dict]):
    with _Running(ctx, 1):
        await asyncio.sleep(ctx.input["seconds"])
        return _result(ctx)


@workflow.with_options(name="chaos_sleep_wide", requests=ResourceRequest(cpu=2))
async def chaos_sleep_wide(ctx: ExecutionContext[dict]):
    with _Running(ctx, 2):
        await asyncio.sleep(ctx.input["seconds"])
        return _result(ctx)


@workflow.with_options(name="chaos_fail", requests=ResourceRequest(cpu=1))
async def chaos_fail(ctx: ExecutionContext[dict]):
    with _Running(ctx, 1):
        await asyncio.sleep(0.05)
        raise RuntimeError(f"chaos_fail fails on purpose (attempt {ctx.attempt} on {ctx.worker_name})")


# Flow control (bench/chaos/flow_invariants.py): at most two of one key at once, per tenant.
@workflow.with_options(
    name="chaos_keyed", requests=ResourceRequest(cpu=1), concurrency=Concurrency(max=2, key="key")
)
async def chaos_keyed(ctx: ExecutionContext[dict]):
    with _Running(ctx, 1):
        await asyncio.sleep(ctx.input["seconds"])
        return _result(ctx)


# At most 2 starts a second per tenant (burst 1), submitted in bursts of 8 so the bucket binds.
@workflow.with_options(name="chaos_paced", requests=ResourceRequest(cpu=1), rate_limit=RateLimit("2/s"))
async def chaos_paced(ctx: ExecutionContext[dict]):
    started = time.time()  # a first try that completes records no attempt: the body says when
    with _Running(ctx, 1):
        return {**_result(ctx), "started": started}


# Sleeps far past its 1 s timeout: every attempt is stopped for it, and it ends FAILED with reason
# timeout (Observations.must_time_out). Quick retries, so it is final well within the drain.
@workflow.with_options(
    name="chaos_overrun",
    requests=ResourceRequest(cpu=1),
    timeout="1s",
    retry=Retry(max_attempts=2, initial_delay="200ms", jitter=False),
)
async def chaos_overrun(ctx: ExecutionContext[dict]):
    with _Running(ctx, 1):
        await asyncio.sleep(60)
        return _result(ctx)


# More cores than any chaos worker advertises (4): it must wait, CREATED, and explain must say why.
@workflow.with_options(name="chaos_never_fits", requests=ResourceRequest(cpu=64))
async def chaos_never_fits(ctx: ExecutionContext[dict]):
    with _Running(ctx, 64):
        return _result(ctx)
