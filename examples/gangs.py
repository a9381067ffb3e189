"""Gangs: one execution on several workers at once, all or none (docs/guides/gangs.md)."""

from flux import ExecutionContext, Gang, workflow


@workflow.with_options(gang=Gang(size=2))
async def hello_gang(ctx: ExecutionContext[str]) -> dict:
    # Every member runs this body on its own worker; ctx.gang says who is who.
    gang = ctx.gang
    return {
        "rank": gang.rank,
        "size": gang.size,
        "worker": ctx.worker_name,
        "leader": f"{gang.leader.worker} at {gang.leader.address}",
        "greeting": f"{ctx.input}, from member {gang.rank} of {gang.size}",
    }


@workflow.with_options(gang=Gang(size=3, same="rack"))
async def rack_local(ctx: ExecutionContext[None]) -> str:
    # Three members on workers that share one value of the label rack.
    return ctx.worker_name
