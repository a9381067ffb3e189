"""Flux: resource-aware dispatch of Python workflows.

Public API::

    from flux import workflow, ExecutionContext
    from flux.domain.resource_request import ResourceRequest
"""

# First: it chooses gRPC's socket I/O, which grpc reads once when it is imported (grpc_io.py).
from flux import grpc_io  # noqa: F401  isort: skip
from flux.context import ExecutionContext
from flux.domain.gang import Gang
from flux.domain.limits import Concurrency, RateLimit
from flux.domain.policy import Retry
from flux.domain.resource_request import ResourceRequest
from flux.workflow import WorkflowDefinition, workflow

__all__ = [
    "Concurrency",
    "ExecutionContext",
    "Gang",
    "RateLimit",
    "ResourceRequest",
    "Retry",
    "WorkflowDefinition",
    "workflow",
]
__version__ = "0.1.0"
