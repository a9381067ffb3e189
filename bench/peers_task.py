"""The peers benchmark's task for Flux: return the input, declaring 1 CPU (as Ray's num_cpus=1)."""

from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="one_cpu", requests=ResourceRequest(cpu=1))
async def one_cpu(ctx: ExecutionContext[int]):
    return ctx.input
