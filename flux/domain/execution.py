"""An execution's record and its lifecycle (DESIGN §4).

CREATED -> SCHEDULED (dispatched, resources reserved) -> RUNNING (claimed)
-> COMPLETED | FAILED; CANCELLED from any unfinished state. A dispatch that is
not claimed in time, or a worker lost past its grace period, sends it back to
CREATED. Every dispatch bumps ``generation``; claims and results quoting an
older one are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum


class State(IntEnum):
    # Values equal flux.v1.ExecutionState, so conversion is int() both ways.
    CREATED = 1
    SCHEDULED = 2
    RUNNING = 3
    COMPLETED = 4
    FAILED = 5
    CANCELLED = 6

    @property
    def finished(self) -> bool:
        return self >= State.COMPLETED

    @property
    def label(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class ExecutionError:
    type: str
    message: str
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class WorkflowRef:
    name: str
    version: int
    source_hash: str
    entrypoint: str


@dataclass(frozen=True, slots=True)
class Execution:
    execution_id: str
    workflow: WorkflowRef
    seq: int
    input_json: str
    max_attempts: int
    state: State = State.CREATED
    worker: str = ""
    attempt: int = 1
    generation: int = 0
    output_json: str = ""
    error: ExecutionError | None = None
    gpu_indices: tuple[int, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0
    # Higher is dispatched first among executions competing for a worker (FIFO among equals).
    priority: int = 0

    def evolve(self, **changes: object) -> Execution:
        return replace(self, **changes)  # type: ignore[arg-type]
