"""The replica's strategies (flux/dispatcher/modes/shared/) driven through the dispatcher, on an in-memory shared store.

``SharedMemoryStore`` plays the PostgreSQL database of several replicas: rows
another replica submitted are put in ``executions`` directly, its notices are
sent with ``notify``, and each claim waits until the test settles it, as a
claim in flight does. Every call here is a public entry point of the dispatcher
(submit, connect, claim, why, list_workers, the status snapshot).
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Any

import pytest

from flux.dispatcher.modes.shared.replica import shared
from flux.dispatcher.modes.shared.worker_documents import info_of, load_of
from flux.dispatcher.state.session import Scheduled, Stop
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.domain.execution import Execution, State, WorkflowRef
from flux.domain.worker import WorkerSoftware
from flux.domain.workflow import WorkflowRecord
from flux.observe.status import BUSY, StatusBoard
from flux.store import notices
from flux.store.base import Conflict, PendingRef, WorkerRecord
from tests.unit.harness import Flux, resources, settled
from tests.unit.memory_store import MemoryStore

pytestmark = pytest.mark.timeout(10)


class SharedMemoryStore(MemoryStore):
    replica_id = "here"

    def __init__(self) -> None:
        super().__init__()
        self.epochs: dict[str, int] = {}
        self.claims: list[tuple[list[Execution], asyncio.Future[dict[str, Execution]]]] = []
        self.remote: list[tuple[str, dict[str, Any]]] = []  # the directory: other replicas' workers
        self.inserted: list[Execution] = []
        self._listener: Any = None
        self.cluster = self  # the membership calls (heartbeat, directory, ...) are answered here too

    # ---- what the test does as "another replica"

    def notify(self, notice: notices.Notice) -> None:
        self._listener(notice)

    def submitted_elsewhere(self, execution_id: str, record: WorkflowRecord, seq: int) -> PendingRef:
        self.executions[execution_id] = Execution(
            execution_id=execution_id,
            workflow=WorkflowRef(record.name, record.version, record.source_hash, record.entrypoint),
            seq=seq,
            input_json='"from elsewhere"',
            max_attempts=record.max_attempts,
        )
        return PendingRef(execution_id, seq, record.name, record.version)

    def settle(self, won: set[str]) -> None:
        """Answer the oldest claim in flight: the rows in ``won`` are ours, the rest went elsewhere."""
        dispatches, future = self.claims.pop(0)
        rows = {}
        for d in dispatches:
            if d.execution_id in won:
                row = self.executions[d.execution_id]
                rows[d.execution_id] = self.executions[d.execution_id] = row.evolve(
                    state=State.SCHEDULED,
                    worker=d.worker,
                    gpu_indices=d.gpu_indices,
                    generation=row.generation + 1,
                )
        future.set_result(rows)

    # ---- the shared store's calls

    def subscribe(self, callback: Any) -> None:
        self._listener = callback

    def claim(self, dispatches: list[Execution]) -> asyncio.Future[dict[str, Execution]]:
        future: asyncio.Future[dict[str, Execution]] = asyncio.get_running_loop().create_future()
        self.claims.append((dispatches, future))
        return future

    async def insert_dispatched(self, execution: Execution) -> None:
        self.inserted.append(execution)
        self.executions[execution.execution_id] = execution

    async def cancel(self, execution_id: str, now: float) -> Execution | None:
        row = self.executions.get(execution_id)
        if row is None or row.state.finished:
            return None
        self.executions[execution_id] = row = row.evolve(state=State.CANCELLED, updated_at=now)
        return row

    async def load_workflows(self) -> list[WorkflowRecord]:
        return await self.list_workflows()

    async def pending_refs(self) -> list[PendingRef]:
        rows = sorted((e for e in self.executions.values() if e.state is State.CREATED), key=lambda e: e.seq)
        return [PendingRef(e.execution_id, e.seq, e.workflow.name, e.workflow.version) for e in rows]

    async def directory(self, replica_timeout: float) -> list[tuple[str, dict[str, Any]]]:
        return self.remote

    async def get_worker(self, name: str, replica_timeout: float) -> WorkerRecord | None:
        return None

    async def set_worker_connected(self, *args: Any) -> None:
        pass

    async def worker_paused(self, name: str) -> bool:
        return False

    async def heartbeat(self, load: dict[str, Any]) -> None:
        pass

    async def sweep(self, dead_after: float, now: float) -> list[Execution]:
        return []

    async def announce(self, address: str) -> None:
        pass


@pytest.fixture
async def replica():
    store = SharedMemoryStore()
    f = await Flux(store, modes=shared(store)).start()  # type: ignore[arg-type]
    yield f
    await f.d.stop()


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


async def test_a_failed_claim_puts_the_work_back_in_line_and_sends_nothing(replica) -> None:
    store: SharedMemoryStore = replica.store
    record = await replica.workflow(cpu=4)
    w = await replica.worker(cpu=4)
    store.notify(notices.PendingAdded((store.submitted_elsewhere("x1", record, 10),)))
    _, future = store.claims.pop()
    future.set_exception(OSError("the database is down"))
    await settled()
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


async def test_status_explain_and_the_listing_count_the_workers_of_other_replicas(replica) -> None:
    store: SharedMemoryStore = replica.store
    await replica.workflow(cpu=8)
    await replica.worker("here-small", cpu=2)
    store.remote = [remote_worker("there-big", 8)]
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
