"""Workflows that declare what they need, as in DESIGN §2.

Each lands only on a worker that has the labels, free resources and packages
it asks for; with none connected it waits, and `flux execution explain` says why.
The bodies stay light so the examples run anywhere they are dispatched.
"""

from importlib import metadata

from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest


def _versions(*names: str) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


@workflow.with_options(
    name="data_processing_workflow",
    requests=ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]),
    affinity={"role": "training"},
)
async def data_processing_workflow(ctx: ExecutionContext[dict[str, str]]):
    return {"rows": len(ctx.input or {}), "worker": ctx.worker_name}


@workflow.with_options(
    name="model_training_workflow",
    requests=ResourceRequest(cpu=4, memory="8Gi", gpu=1, packages=["torch>=2.0.0", "transformers"]),
)
async def model_training_workflow(ctx: ExecutionContext[dict]):
    return {"gpus": list(ctx.assigned_gpus), "versions": _versions("torch", "transformers")}


@workflow.with_options(name="fine_tune", requests=ResourceRequest.with_gpu(2))
async def fine_tune(ctx: ExecutionContext[dict]):
    return {"gpus": list(ctx.assigned_gpus), "attempt": ctx.attempt}


@workflow.with_options(
    name="large_training_run",
    requests=ResourceRequest(cpu=8, memory="16Gi", gpu=4, disk="100Gi"),
    affinity={"role": "training"},
)
def large_training_run(ctx: ExecutionContext[dict]):
    # A sync workflow: workers run it in a thread so the event loop stays free.
    return {"gpus": list(ctx.assigned_gpus), "epochs": (ctx.input or {}).get("epochs", 1)}
