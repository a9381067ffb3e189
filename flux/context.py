"""The object a workflow receives: its input and where it is running."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from flux.domain.gang import GangInfo

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
    # The details of the latest heartbeat of an earlier attempt (None when there was none):
    # resume where the last try stopped.
    last_heartbeat: Any = None
    # A gang member's place in its gang (rank, size, members with their addresses, leader); None for
    # an ordinary execution. Set before the body starts, so it can rendezvous at the leader's address.
    gang: GangInfo | None = None
    # The outputs of the executions it waited for (``client.run(..., after=[...])``), by
    # execution id: {execution_id: output}; None for one that did not complete (when="failed"
    # or "finished"). Empty when it waited for none.
    upstream: dict[str, Any] = field(default_factory=dict)
    # Set by the worker: takes each heartbeat's details (coalesced there); unset in a unit test.
    _beat: Callable[[Any], None] | None = field(default=None, repr=False, compare=False)

    def heartbeat(self, details: Any = None) -> None:
        """Say this attempt is alive, with ``details`` (JSON-serialisable) for a later attempt.

        Cheap enough for a tight loop: the worker sends at most one heartbeat per interval, the
        latest details winning. An attempt with a ``heartbeat_timeout`` that stays silent longer
        is stopped and counted as failed.
        """
        if self._beat is not None:
            self._beat(details)
