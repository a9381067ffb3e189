"""Workflows of the tracing tests: each opens a span of its own, which must nest under flux.execute."""

import asyncio
import os
import time

from opentelemetry import trace

from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest

tracer = trace.get_tracer("user-code")


# One core each: a worker with --cpus 1 runs one at a time, so a second one waits for it.
@workflow.with_options(name="traced_step", requests=ResourceRequest(cpu=1))
async def traced_step(ctx: ExecutionContext[str | None]):
    """Holds its core until the file named by its input exists (at most 60 s): the test says when."""
    with tracer.start_as_current_span("user.step"):
        deadline = time.monotonic() + 60
        while ctx.input and not os.path.exists(ctx.input) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    return {"attempt": ctx.attempt, "worker": ctx.worker_name}


@workflow.with_options(name="traced_blocking", requests=ResourceRequest(cpu=1))
def traced_blocking(ctx: ExecutionContext[float]):
    # A sync workflow runs in the worker's thread pool: its span must still find its parent.
    with tracer.start_as_current_span("user.blocking"):
        return {"attempt": ctx.attempt}
