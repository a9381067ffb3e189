"""A batch: the executions of one ``client.map`` (or ``flux workflow run --many``) as one object.

A batch is stored once (``batches``: its id, tenant, workflow, ``max_concurrent``, when it was made
and cancelled); each member's row names it (``executions.batch_id``), so its progress is counted
from the members' own rows and never drifts. A batch is made only when asked (RunWorkflows with
``batch`` or ``max_concurrent``; ``client.map`` always asks), so a plain bulk submission costs
what it did.

``max_concurrent`` is a concurrency budget like a workflow's ``Concurrency`` (flux/matching/flow.py):
a throttled member carries the batch's id and max in its flow keys (``BATCH_KEY``, ``BATCH_MAX_KEY``),
so every place that derives an execution's gates from its row (this server's admission, a replica's
claim guard reading another replica's rows) derives the batch's gate too, with no lookup.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, replace

from flux.domain.execution import State

# The flow-key parts a throttled member carries: its batch's id and that batch's max_concurrent.
BATCH_KEY = "batch"
BATCH_MAX_KEY = "batch_max"
MAX_CONCURRENT = 1_000_000
MAX_CONCURRENT_FORM = f"an int between 1 and {MAX_CONCURRENT:,}"
BATCH_ID_FORM = "'b-' and 24 lowercase hex digits, as RunWorkflows answered it"
_BATCH_ID = re.compile(r"b-[0-9a-f]{24}")


def new_batch_id() -> str:
    return "b-" + uuid.uuid4().hex[:24]


def check_batch_id(value: object, field: str = "batch_id") -> str:
    if not isinstance(value, str) or not _BATCH_ID.fullmatch(value):
        raise ValueError(f"{field} must be {BATCH_ID_FORM}; got {value!r:.80}")
    return value


def check_max_concurrent(value: object, field: str = "max_concurrent") -> int:
    """``value`` when it is an int from 1 to MAX_CONCURRENT; TypeError/ValueError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be {MAX_CONCURRENT_FORM}; got {type(value).__name__} {value!r:.80}")
    if not 1 <= value <= MAX_CONCURRENT:
        raise ValueError(f"{field} must be {MAX_CONCURRENT_FORM}; got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Batch:
    batch_id: str
    tenant: str
    workflow_name: str
    # 0: no limit.
    max_concurrent: int = 0
    created_at: float = 0.0
    # 0: not cancelled. A cancelled batch takes no new members.
    cancelled_at: float = 0.0

    def evolve_cancelled(self, at: float) -> Batch:
        return self if at == self.cancelled_at else replace(self, cancelled_at=at)

    def flow_keys(self) -> tuple[tuple[str, str], ...]:
        """The flow-key parts of a member (none for an unthrottled batch)."""
        if not self.max_concurrent:
            return ()
        return ((BATCH_KEY, self.batch_id), (BATCH_MAX_KEY, str(self.max_concurrent)))


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """A batch and how many of its members are in each state now."""

    batch: Batch
    created: int = 0
    running: int = 0  # SCHEDULED or RUNNING
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.created + self.running + self.completed + self.failed + self.cancelled

    @property
    def finished(self) -> bool:
        return self.created == 0 and self.running == 0

    @classmethod
    def of(cls, batch: Batch, counts: dict[State, int]) -> BatchProgress:
        return cls(
            batch,
            created=counts.get(State.CREATED, 0),
            running=counts.get(State.SCHEDULED, 0) + counts.get(State.RUNNING, 0),
            completed=counts.get(State.COMPLETED, 0),
            failed=counts.get(State.FAILED, 0),
            cancelled=counts.get(State.CANCELLED, 0),
        )

    def describe(self) -> str:
        """``b-… 40/100 finished: 3 running, 57 waiting (max 4 at once)``."""
        done = self.completed + self.failed + self.cancelled
        most = f" (max {self.batch.max_concurrent} at once)" if self.batch.max_concurrent else ""
        return f"{self.batch.batch_id} {done}/{self.total} finished: {self.running} running, {self.created} waiting{most}"
