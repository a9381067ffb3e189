"""The object a workflow receives: its input and where it is running."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


# No slots: with slots a frozen dataclass cannot take the __orig_class__ that
# ExecutionContext[T](...) sets, and Python 3.11 lets that TypeError escape.
@dataclass(frozen=True)
class ExecutionContext(Generic[T]):
    """What one execution of a workflow sees.

    Build one yourself to call a workflow in a unit test:
    ``await my_workflow(ExecutionContext(input={"x": 1}))``.
    """

    input: T
    execution_id: str = "local"
    workflow_name: str = ""
    worker_name: str = ""
    attempt: int = 1
    # GPU indices reserved for this execution; set CUDA_VISIBLE_DEVICES from them.
    assigned_gpus: tuple[int, ...] = ()
