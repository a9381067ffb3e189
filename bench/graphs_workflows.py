"""Workflows ``python -m bench graphs`` registers on real servers."""

import time

from flux import ExecutionContext, workflow


@workflow
async def graph_step(ctx: ExecutionContext[object]):
    """Returns when its body started (the worker's clock: the same machine as the server)."""
    return {"started": time.time()}
