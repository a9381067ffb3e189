"""Batches through the dispatcher (in-memory store, fake workers): ``max_concurrent`` is a budget
the matcher admits through, like a concurrency key; a batch joined, read and cancelled as one."""

from __future__ import annotations

import pytest

from flux.dispatcher.state.flow import BATCH_LIMIT, gates_for
from flux.dispatcher.transitions.batches import BatchAsk, checked_ask
from flux.domain.batch import Batch, BatchProgress, check_max_concurrent
from flux.domain.execution import State
from flux.domain.limits import Concurrency, Flow
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.errors import FailedPrecondition, InvalidArgument, NotFound
from flux.matching.flow import FlowControl

pytestmark = pytest.mark.timeout(10)


async def _batch(
    flux, count: int, most: int | None = None, workflow: str = "job", **ask: object
) -> list[str]:
    ask = {"new": True, "max_concurrent": most, **ask}
    executions = await flux.d.submit_many(
        workflow, [f'{{"i": {i}}}' for i in range(count)], batch=BatchAsk(**ask)
    )
    return [e.execution_id for e in executions]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param(0, ValueError, id="zero"),
        pytest.param(-1, ValueError, id="negative"),
        pytest.param(1_000_001, ValueError, id="over the most"),
        pytest.param("4", TypeError, id="a string"),
        pytest.param(2.0, TypeError, id="a float"),
        pytest.param(True, TypeError, id="a bool"),
        pytest.param(None, TypeError, id="none"),
    ],
)
def test_max_concurrent_is_an_int_from_one_to_a_million(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_concurrent must be an int between 1 and 1,000,000"):
        check_max_concurrent(value)


def test_a_request_may_join_a_batch_or_make_one_not_both() -> None:
    with pytest.raises(InvalidArgument, match="leave batch and max_concurrent unset"):
        checked_ask(False, 2, "b-" + "a" * 24)
    with pytest.raises(InvalidArgument, match="batch_id must be 'b-' and 24"):
        checked_ask(False, None, "b-1")
    with pytest.raises(InvalidArgument, match="max_concurrent must be an int"):
        checked_ask(True, 0, "")
    assert not checked_ask(False, None, "").wanted and checked_ask(False, 3, "").wanted


def test_a_member_s_gate_comes_from_its_flow_keys_alone() -> None:
    batch = Batch("b-" + "c" * 24, "default", "job", max_concurrent=3)
    record = WorkflowRecord("job", 1, "", "main", ResourceRequest(), {}, 3)
    [gate] = gates_for(record, "default", dict(batch.flow_keys()))
    assert (gate.budget, gate.max, gate.label, gate.limit) == (
        f"b/{batch.batch_id}",
        3,
        f"batch {batch.batch_id}",
        BATCH_LIMIT,
    )
    keyed = WorkflowRecord("job", 1, "", "main", ResourceRequest(), {}, 3, flow=Flow(Concurrency(1, key="c")))
    gates = gates_for(keyed, "default", {"concurrency": "x", **dict(batch.flow_keys())})
    assert [g.budget for g in gates] == ["c/default/job/x", f"b/{batch.batch_id}"]
    assert gates_for(record, "default", {}) == ()  # an unthrottled batch's member is unlimited


def test_the_pure_budget_admits_at_most_max_of_a_batch() -> None:
    [gate] = gates_for(
        WorkflowRecord("job", 1, "", "main", ResourceRequest(), {}, 3),
        "default",
        {"batch": "b-x", "batch_max": "2"},
    )
    control = FlowControl()
    admitted = [control.admit(f"e{i}", (gate,), "", 0, 0.0) for i in range(5)]
    assert admitted == [True, True, False, False, False]
    assert control.blocked("e2", 0.0).describe() == "batch b-x at 2/2 running"
    assert control.release("e0", 0.0) == ["e2"]


async def test_at_most_max_concurrent_members_are_dispatched_and_the_next_when_one_ends(flux):
    await flux.workflow("job")
    w = await flux.worker(capacity=16)
    ids = await _batch(flux, 5, 2)
    assert w.scheduled() == ids[:2]
    assert all(flux.state(e) is State.CREATED and e not in flux.d.queue for e in ids[2:])
    batch_id = flux.get(ids[0]).batch_id
    assert "batch " + batch_id + " at 2/2 running" in (await flux.d.why(ids[3])).summary
    w.claim(ids[0])
    await w.complete(ids[0])
    assert w.scheduled() == [ids[2]]


async def test_waiting_members_hold_no_room_and_block_no_other_work(flux):
    await flux.workflow("job")
    w = await flux.worker(capacity=2)
    ids = await _batch(flux, 6, 1)
    free = await flux.run("job")
    assert w.scheduled() == [ids[0], free]


async def test_an_unthrottled_batch_is_a_batch_with_no_budget(flux):
    await flux.workflow("job")
    w = await flux.worker(capacity=16)
    ids = await _batch(flux, 3)
    assert w.scheduled() == ids
    assert flux.get(ids[0]).flow_keys == () and flux.get(ids[0]).batch_id.startswith("b-")


async def test_joining_takes_the_batch_s_terms_and_refuses_what_does_not_fit(flux):
    await flux.workflow("job")
    await flux.workflow("other")
    w = await flux.worker(capacity=16)
    first = await _batch(flux, 2, 1)
    batch_id = flux.get(first[0]).batch_id
    more = await _batch(flux, 2, new=False, max_concurrent=None, batch_id=batch_id)
    assert flux.get(more[0]).batch_id == batch_id and dict(flux.get(more[0]).flow_keys)["batch_max"] == "1"
    assert w.scheduled() == [first[0]]  # the joined members wait on the same budget
    with pytest.raises(InvalidArgument, match="runs workflow 'job'"):
        await _batch(flux, 1, workflow="other", new=False, max_concurrent=None, batch_id=batch_id)
    with pytest.raises(NotFound, match="does not exist"):
        await _batch(flux, 1, new=False, max_concurrent=None, batch_id="b-" + "0" * 24)
    with pytest.raises(NotFound):  # another tenant's batch does not exist for this one
        await flux.d.submit_many("job", ["{}"], tenant="ml", batch=BatchAsk(batch_id=batch_id))
    await flux.d.cancel_batch(batch_id)
    with pytest.raises(FailedPrecondition, match="is cancelled"):
        await _batch(flux, 1, new=False, max_concurrent=None, batch_id=batch_id)


async def test_progress_counts_the_members_and_cancel_ends_the_unfinished(flux):
    await flux.workflow("job")
    w = await flux.worker(capacity=16)
    ids = await _batch(flux, 5, 2)
    batch_id = flux.get(ids[0]).batch_id
    assert w.scheduled() == ids[:2]
    w.claim(ids[0])
    await w.complete(ids[0])
    [next_one] = w.scheduled()
    progress = await flux.d.get_batch(batch_id)
    assert (progress.total, progress.completed, progress.finished) == (5, 1, False)
    cancelled = await flux.d.cancel_batch(batch_id)
    assert (cancelled.completed, cancelled.cancelled, cancelled.finished) == (1, 4, True)
    assert cancelled.batch.cancelled_at > 0
    assert w.scheduled() == []  # no waiting member was let in only to be cancelled
    assert all(flux.state(e) is State.CANCELLED for e in ids[1:])
    with pytest.raises(NotFound):
        await flux.d.get_batch(batch_id, tenant="ml")


def test_progress_describes_itself() -> None:
    batch = Batch("b-" + "d" * 24, "default", "job", max_concurrent=4)
    counts = {State.CREATED: 5, State.SCHEDULED: 1, State.RUNNING: 3, State.COMPLETED: 1}
    progress = BatchProgress.of(batch, counts)
    assert (progress.total, progress.running, progress.finished) == (10, 4, False)
    assert progress.describe() == f"{batch.batch_id} 1/10 finished: 4 running, 5 waiting (max 4 at once)"


async def test_a_replica_cancels_a_batchs_waiting_members_in_one_store_call(replica) -> None:
    # No worker: every member waits, on the batch's budget or in line. One store call cancels them
    # all, each leaves this replica's queue and budget, and the cancel is counted once each.
    store = replica.store
    await replica.workflow("job")
    calls: list[int] = []
    cancel_many = store.cancel_many

    async def counted(execution_ids: list[str], now: float):
        calls.append(len(execution_ids))
        return await cancel_many(execution_ids, now)

    store.cancel_many = counted
    ids = await _batch(replica, 5, 2)
    batch_id = replica.get(ids[0]).batch_id
    done = await replica.d.cancel_batch(batch_id)
    assert calls == [5] and (done.cancelled, done.finished) == (5, True)
    assert all(store.executions[e].state is State.CANCELLED for e in ids)
    assert not any(e in replica.d.queue or e in replica.d.table for e in ids)
    assert replica.d.events.counters.cancelled == 5
