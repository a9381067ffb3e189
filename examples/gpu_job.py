"""One GPU for a moment: the work that wakes the Kubernetes GPU pool (README "Running on Kubernetes")."""

import asyncio

from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="gpu_job", requests=ResourceRequest(cpu=1, memory="4Gi", gpu=1))
async def gpu_job(ctx: ExecutionContext[float]):
    await asyncio.sleep(ctx.input or 0)
    return {"worker": ctx.worker_name, "gpus": list(ctx.assigned_gpus)}
