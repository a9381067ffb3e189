"""Replicas: a pending timeout ends a row once, on whichever replica holds it (modes/shared/waiting.py).

One replica on the in-memory shared store (shared_memory_store.py); the test plays the others:
it submits rows "elsewhere", announces them, and claims or ends them first.
"""

from __future__ import annotations

import dataclasses

import pytest

from flux.domain.execution import ExecutionError, State
from flux.domain.policy import PENDING_TIMEOUT, Policy
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.store import notices
from flux.store.base import PendingRef
from tests.unit.harness import Flux, settled
from tests.unit.shared_memory_store import SharedMemoryStore

pytestmark = pytest.mark.timeout(10)


async def announce(replica: Flux, execution_id: str, **row: object) -> PendingRef:
    """A row submitted through another replica a minute ago, with a 90 s pending timeout."""
    declared = WorkflowRecord(
        "job", 0, "", "main", ResourceRequest(gpu=1), {}, 3, policy=Policy(pending_timeout=90.0)
    )
    [record] = await replica.d.register_workflows("job.py", "# job\n", [declared])
    store: SharedMemoryStore = replica.store
    store.submitted_elsewhere(execution_id, record, 10)
    store.executions[execution_id] = stored = store.executions[execution_id].evolve(
        created_at=replica.clock() - 60, policy=record.policy, **row
    )
    ref = PendingRef.of(stored)
    store.notify(notices.PendingAdded((ref,)))
    return ref


def test_a_pending_line_carries_the_generation_the_submission_time_and_the_attempts() -> None:
    ref = PendingRef("a1", 17, "train model", 3, "ml", 12.5, 4, 1_700_000_000.25, 2, True)
    assert notices.parse_pending(notices.pending_line(ref)) == [ref]
    # A line from a replica that did not say them: generation 0, submitted when learned, never run.
    [old] = notices.parse_pending("a1 17 3 train model\tml\t12.5")
    assert old == dataclasses.replace(ref, generation=0, created_at=0.0, attempt=1, started=False)


async def test_the_mirror_fires_a_pending_timeout_counted_from_the_submission(replica) -> None:
    store: SharedMemoryStore = replica.store
    await announce(replica, "x1", generation=2)
    mirrored = replica.d.table.get("x1")
    assert (mirrored.generation, mirrored.created_at) == (2, replica.clock() - 60)
    replica.expire(29)  # 89 s since its submission, no worker has a GPU
    await settled()
    assert store.executions["x1"].state is State.CREATED
    replica.expire(2)
    await settled()
    row = store.executions["x1"]
    assert (row.state, row.reason, row.error.type) == (State.FAILED, PENDING_TIMEOUT, "PendingTimeout")
    assert "x1" not in replica.d.table and (await replica.d.get("x1")).state is State.FAILED
    assert replica.d.events.counters.timeouts[PENDING_TIMEOUT] == 1


async def test_a_row_claimed_elsewhere_meanwhile_is_not_failed_and_the_copy_is_let_go(replica) -> None:
    store: SharedMemoryStore = replica.store
    await announce(replica, "x1")
    # Another replica claimed it (a claim bumps the generation), and its dispatch came back.
    store.executions["x1"] = store.executions["x1"].evolve(generation=1)
    replica.expire(31)
    await settled()
    assert store.executions["x1"].state is State.CREATED and "x1" not in replica.d.table
    assert replica.d.events.counters.timeouts.get(PENDING_TIMEOUT, 0) == 0


async def test_a_row_another_replica_failed_first_is_failed_once(replica) -> None:
    store: SharedMemoryStore = replica.store
    await announce(replica, "x1")
    first = store.executions["x1"].evolve(
        state=State.FAILED, reason=PENDING_TIMEOUT, error=ExecutionError("PendingTimeout", "there")
    )
    store.executions["x1"] = first
    replica.expire(31)
    await settled()
    assert store.executions["x1"] is first  # not written twice
    assert replica.d.events.counters.timeouts.get(PENDING_TIMEOUT, 0) == 0


async def test_a_row_that_ever_ran_has_no_pending_timeout_on_the_mirror(replica) -> None:
    store: SharedMemoryStore = replica.store
    ref = await announce(replica, "x1", attempt=2)
    assert ref.started is False  # no attempt recorded: PendingRef.of says so from the row
    store.executions.pop("x1")
    replica.d.table.drop("x1")
    started = dataclasses.replace(ref, execution_id="x2", started=True)
    store.submitted_elsewhere("x2", replica.d.catalogue.get("job", 1), 10)
    store.notify(notices.PendingAdded((started,)))
    replica.expire(31)
    await settled()
    assert store.executions["x2"].state is State.CREATED and replica.d.table.get("x2") is not None
