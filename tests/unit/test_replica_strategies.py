"""The replica's strategies (flux/dispatcher/modes/shared/) driven through the dispatcher, on an in-memory shared store.

``SharedMemoryStore`` (shared_memory_store.py) plays the PostgreSQL database of
several replicas: rows another replica submitted are put in ``executions``
directly, its notices are sent with ``notify``, and each claim waits until the
test settles it, as a claim in flight does. Every call here is a public entry
point of the dispatcher (submit, connect, claim, why, list_workers, the status
snapshot).
"""

from __future__ import annotations

import asyncio
import logging
from types import MappingProxyType
from typing import Any

import pytest

from flux.dispatcher.modes.shared.worker_documents import info_of, load_of
from flux.dispatcher.state.session import Scheduled, Stop
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.domain.execution import State
from flux.domain.worker import WorkerSoftware
from flux.errors import Unavailable
from flux.observe.status import BUSY, StatusBoard
from flux.store import notices
from flux.store.base import Conflict
from tests.unit.harness import resources, settled
from tests.unit.shared_memory_store import SharedMemoryStore

pytestmark = pytest.mark.timeout(10)


def remote_worker(name: str, cpu: int) -> tuple[str, dict[str, Any]]:
    entry = WorkerEntry(name, "", MappingProxyType({}), 16, resources(cpu), WorkerSoftware())
    return name, {**info_of(entry), **load_of(entry), "replica": "there"}


async def test_a_placement_reaches_the_worker_only_once_claimed_and_a_lost_claim_frees_it(replica) -> None:
    store: SharedMemoryStore = replica.store
    record = await replica.workflow(cpu=4)
    w = await replica.worker(cpu=4)
    refs = (store.submitted_elsewhere("x1", record, 10), store.submitted_elsewhere("x2", record, 11))
    store.notify(notices.PendingAdded(refs))
    # x1 is reserved on w1 (it has room for one) and claimed; nothing is sent before the answer.
    [(dispatches, _)] = store.claims
    assert [d.execution_id for d in dispatches] == ["x1"] and w.events() == []
    assert replica.holdings("w1") == {"x1"}
    store.settle(won=set())  # another replica claimed x1 first
    await settled()  # the claim's answer arrives, then the cycle applies it
    assert "x1" not in replica.d.table
    # The freed worker took the next in line at once; that claim is won.
    assert replica.holdings("w1") == {"x2"}
    store.settle(won={"x2"})
    await settled()
    [event] = w.events()
    assert isinstance(event, Scheduled) and event.execution.execution_id == "x2"
    assert (event.execution.generation, event.execution.input_json) == (1, '"from elsewhere"')
    assert (await replica.d.get("x2")).state is State.SCHEDULED
    assert replica.d.claim("w1", w.token, "x2", 1).state is State.RUNNING


@pytest.mark.parametrize(
    ("away", "level"), [(True, logging.WARNING), (False, logging.ERROR)], ids=["database away", "a fault"]
)
async def test_a_failed_claim_puts_the_work_back_in_line_and_sends_nothing(
    replica, caplog: pytest.LogCaptureFixture, away: bool, level: int
) -> None:
    store: SharedMemoryStore = replica.store
    store.unavailable = (OSError,) if away else ()  # what the store says a database away raises
    record = await replica.workflow(cpu=4)
    w = await replica.worker(cpu=4)
    store.notify(notices.PendingAdded((store.submitted_elsewhere("x1", record, 10),)))
    _, future = store.claims.pop()
    future.set_exception(OSError("the database is down"))
    with caplog.at_level(logging.WARNING):
        await settled()
    # A database away is the operator's to see, not a fault of ours: a warning, one per claim.
    [line] = [r for r in caplog.records if "claiming 1 executions failed" in r.getMessage()]
    assert line.levelno == level
    assert w.events() == [] and replica.holdings("w1") == set()
    shape = replica.d.catalogue.shape_of(replica.d.table.get("x1"))
    assert [p.execution_id for p in replica.d.pending().iter_shape(shape)] == ["x1"]


async def test_a_submission_one_of_our_workers_fits_is_stored_already_dispatched(replica) -> None:
    store: SharedMemoryStore = replica.store
    await replica.workflow(cpu=2)
    w = await replica.worker(cpu=4)
    execution_id = await replica.run()
    assert [e.execution_id for e in store.inserted] == [execution_id] and store.claims == []
    [event] = w.events()
    assert isinstance(event, Scheduled) and event.execution.generation == 1


async def test_a_submission_whose_dispatched_insert_fails_is_refused_and_frees_the_worker(replica) -> None:
    store: SharedMemoryStore = replica.store
    await replica.workflow(cpu=4)
    w = await replica.worker(cpu=4)
    store.fail_next_insert = OSError("the database is down")
    with pytest.raises(Unavailable, match="could not store the execution"):
        await replica.run()
    assert w.events() == [] and replica.holdings("w1") == set() and len(replica.d.table) == 0
    execution_id = await replica.run()  # the worker took the next one at once
    assert [e.execution_id for e in store.inserted] == [execution_id] and replica.holdings("w1") == {
        execution_id
    }


async def test_status_explain_and_the_listing_count_the_workers_of_other_replicas(replica) -> None:
    store: SharedMemoryStore = replica.store
    await replica.workflow(cpu=8)
    await replica.worker("here-small", cpu=2)
    store.cluster.remote = [remote_worker("there-big", 8)]
    execution_id = await replica.run()  # fits only the other replica's worker: pending here
    why = await replica.d.why(execution_id)
    assert why.explanation is not None
    assert [v.worker for v in why.explanation.verdicts] == ["here-small", "there-big"]
    assert not why.explanation.infeasible
    status = await StatusBoard(replica.d).snapshot()
    assert [w.name for w in status.workers] == ["here-small", "there-big"]
    assert status.fleet.connected_by_transport["grpc"] == 2
    assert status.pending_by_reason[BUSY] == 1  # as explain says: a connected worker could run it
    assert [w.name for w in await replica.d.fleet_workers()] == ["here-small", "there-big"]


async def test_a_cancel_committed_through_another_replica_stops_the_dispatch_here(replica) -> None:
    store: SharedMemoryStore = replica.store
    await replica.workflow(cpu=2)
    w = await replica.worker(cpu=4)
    execution_id = await replica.run()
    w.events()
    store.notify(notices.Cancelled(execution_id))
    [event] = w.events()
    assert isinstance(event, Stop) and event.execution_id == execution_id
    assert replica.holdings("w1") == set()
    assert replica.d.table.finished[execution_id].state is State.CANCELLED


async def test_a_write_that_conflicts_drops_what_this_replica_holds(replica) -> None:
    store: SharedMemoryStore = replica.store
    await replica.workflow(cpu=2)
    w = await replica.worker(cpu=4)
    execution_id = await replica.run()
    store.fail_next_commit = Conflict(execution_id)  # e.g. swept while this replica looked dead
    replica.d.claim("w1", w.token, execution_id, 1)
    await settled()  # the write fails, and its answer arrives
    assert execution_id not in replica.d.table
    assert replica.holdings("w1") == set()


async def test_a_resync_between_a_won_claim_and_its_push_leaves_the_dispatch_alone(replica) -> None:
    # The claim's answer and the cycle's apply are two loop steps; a resync of the shared queue
    # between them sees x1 CREATED here and no longer pending in the database. Dropping it as
    # claimed elsewhere left its row SCHEDULED, owned here, on a worker never told (found
    # under load: a replica-kill run ended with two such rows).
    store: SharedMemoryStore = replica.store
    record = await replica.workflow(cpu=4)
    w = await replica.worker(cpu=4)
    store.notify(notices.PendingAdded((store.submitted_elsewhere("x1", record, 10),)))
    store.settle(won={"x1"})
    resync = asyncio.ensure_future(replica.d.feed.resync())  # runs right after the claim's answer
    await settled()
    await resync
    [event] = w.events()
    assert isinstance(event, Scheduled) and event.execution.execution_id == "x1"
    assert replica.holdings("w1") == {"x1"} and replica.d.table.get("x1").state is State.SCHEDULED
    assert not replica.d.binder.claiming


async def test_a_row_owned_here_but_held_nowhere_here_goes_back_on_the_second_audit(replica) -> None:
    store: SharedMemoryStore = replica.store
    record = await replica.workflow(cpu=2)
    await replica.worker(cpu=4)
    store.notify(notices.PendingAdded((store.submitted_elsewhere("x1", record, 10),)))
    store.settle(won={"x1"})
    await settled()
    # x2's row says this replica dispatched it to w1, but the replica holds nothing of it.
    store.submitted_elsewhere("x2", record, 11)
    store._owned(store.executions["x2"].evolve(state=State.SCHEDULED, worker="w1", generation=1))
    fleet, now = replica.d.fleet, replica.d.clock()
    await fleet.audit(now)
    # Once is not enough: a claim answered but not yet applied looks the same for a moment.
    assert store.executions["x2"].state is State.SCHEDULED
    await fleet.audit(now)
    x2 = store.executions["x2"]
    assert (x2.state, x2.worker, x2.attempt, "x2" in store.owners) == (State.CREATED, "", 1, False)
    # What this replica holds is left alone, however often it is audited.
    assert store.executions["x1"].state is State.SCHEDULED and replica.holdings("w1") == {"x1"}
