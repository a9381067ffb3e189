"""Flux: resource-aware dispatch of Python workflows.

Public API::

    from flux import workflow, ExecutionContext
    from flux.domain.resource_request import ResourceRequest
"""

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
