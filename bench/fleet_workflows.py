"""Workflows for the fleet-scale bench: one fits any worker, one needs a label and two cores."""

from flux import ExecutionContext, Gang, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="fleet_unconstrained")
async def fleet_unconstrained(ctx: ExecutionContext[object]):
    return None


@workflow.with_options(name="fleet_constrained", affinity={"zone": "zone-1"}, requests=ResourceRequest(cpu=2))
async def fleet_constrained(ctx: ExecutionContext[object]):
    return None


@workflow.with_options(name="fleet_gang", gang=Gang(size=8))
async def fleet_gang(ctx: ExecutionContext[object]):
    return None
