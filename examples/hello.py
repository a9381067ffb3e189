"""The smallest workflow: no requests, so it runs on any worker."""

from flux import ExecutionContext, workflow


@workflow
async def hello(ctx: ExecutionContext[str]):
    return f"Hello, {ctx.input or 'World'}!"
