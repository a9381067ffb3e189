"""The workflow the arrays bench maps (bench/graphs_arrays.py): returns its input."""

from flux import ExecutionContext, workflow


@workflow.with_options(name="array_member")
async def array_member(ctx: ExecutionContext[object]) -> object:
    return ctx.input
