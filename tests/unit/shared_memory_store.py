"""An in-memory ``SharedStore`` (flux/store/shared.py): the database of several replicas, as one of them sees it.

``MemoryStore`` plays the rows; this adds what PostgreSQL does for replicas, in
the same dicts: claims, ownership (``owners``), the dispatch log, preemption
rows and, in ``MemoryCluster``, the worker directory. The test plays the other
replicas: it puts their rows in ``executions`` (``submitted_elsewhere``) and
their workers in ``cluster.remote``, sends the notices PostgreSQL would
(``notify``; no call here sends one by itself), and settles each claim in
flight when it chooses (``settle``), as a claim's transaction ends.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.store import notices
from flux.store.base import Held, PendingRef, WorkerIdentity, WorkerRecord
from flux.store.shared import FlowGuard, FlowRow, QuotaGuard
from tests.unit.memory_store import MemoryStore

HELD = (State.SCHEDULED, State.RUNNING)


class SharedMemoryStore(MemoryStore):
    replica_id = "here"
    # Declared on the class, as PostgresStore's, so tests/unit/test_handle.py sees them there.
    cluster: MemoryCluster
    quota_guard: QuotaGuard | None
    flow_guard: FlowGuard | None

    def __init__(self) -> None:
        super().__init__()
        self.cluster = MemoryCluster(self)
        self.quota_guard = None
        self.flow_guard = None
        self.claims: list[tuple[list[Execution], asyncio.Future[dict[str, Execution]]]] = []
        self.with_rows: set[int] = set()  # the claims (their futures' ids) made to ride with rows
        self.inserted: list[Execution] = []
        self.fail_next_insert: Exception | None = None  # the next insert_dispatched raises it
        self.owners: dict[str, str] = {}  # execution id -> the replica whose worker holds it
        self.dispatches: dict[tuple[str, int], float] = {}  # (execution id, generation) -> when
        self.preemptions: dict[str, tuple[str, float]] = {}  # preemptor -> (replica, when)
        self._listener: Callable[[notices.Notice], None] | None = None

    # ---- what the test does as "another replica"

    def notify(self, notice: notices.Notice) -> None:
        assert self._listener is not None, "nobody subscribed"
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
        """Answer the oldest claim in flight: the rows in ``won`` are ours, the rest went elsewhere.

        While a quota guard is set it has the last word, as in the claim's transaction.
        """
        dispatches, future = self.claims.pop(0)
        if self.quota_guard is not None:
            won = won - self.quota_guard(self._held(), dispatches)
        rows = {}
        for d in dispatches:
            if d.execution_id in won:
                row = self.executions[d.execution_id]
                rows[d.execution_id] = self._owned(
                    row.evolve(
                        state=State.SCHEDULED,
                        worker=d.worker,
                        gpu_indices=d.gpu_indices,
                        generation=row.generation + 1,
                        updated_at=d.updated_at,
                    )
                )
        future.set_result(rows)

    def _owned(self, row: Execution) -> Execution:
        """Commit a row dispatched by this replica: its owner and its entry in the dispatch log."""
        self.executions[row.execution_id] = row
        self.owners[row.execution_id] = self.replica_id
        self.dispatches[(row.execution_id, row.generation)] = row.updated_at
        return row

    def _held(self) -> list[Held]:
        counts: Counter[tuple[str, ResourceRequest, bool]] = Counter()
        for e in self.executions.values():
            record = self.workflows.get((e.workflow.name, e.workflow.version))
            if e.state in HELD and record is not None:  # as the SQL joins the row's workflow
                counts[(e.tenant, record.requests, self.owners.get(e.execution_id) == self.replica_id)] += 1
        return [Held(tenant, requests, mine, n) for (tenant, requests, mine), n in counts.items()]

    # ---- the shared store's calls

    async def save_worker(self, identity: WorkerIdentity) -> None:
        await super().save_worker(identity)
        self.cluster.take(identity.name)  # as PostgreSQL's: the worker is this replica's from now

    def subscribe(self, callback: Callable[[notices.Notice], None]) -> None:
        self._listener = callback

    def claim(
        self, dispatches: list[Execution], with_rows: bool = False
    ) -> asyncio.Future[dict[str, Execution]]:
        future: asyncio.Future[dict[str, Execution]] = asyncio.get_running_loop().create_future()
        self.claims.append((dispatches, future))
        if with_rows:
            self.with_rows.add(id(future))
        return future

    async def insert_dispatched(self, execution: Execution) -> None:
        if self.fail_next_insert is not None:
            error, self.fail_next_insert = self.fail_next_insert, None
            raise error
        self.inserted.append(execution)
        self._owned(execution)

    async def cancel(self, execution_id: str, now: float) -> Execution | None:
        row = self.executions.get(execution_id)
        if row is None or row.state.finished:
            return None
        self.executions[execution_id] = row = row.evolve(state=State.CANCELLED, updated_at=now)
        return row

    async def cancel_many(self, execution_ids: list[str], now: float) -> list[Execution]:
        cancelled = [await self.cancel(execution_id, now) for execution_id in execution_ids]
        return [row for row in cancelled if row is not None]

    async def fail_waiting(
        self, execution_id: str, generation: int, reason: str, error: ExecutionError, now: float
    ) -> Execution | None:
        row = self.executions.get(execution_id)
        if row is None or row.state is not State.CREATED or row.generation != generation:
            return None
        self.executions[execution_id] = row = row.evolve(
            state=State.FAILED, reason=reason, error=error, updated_at=now
        )
        return row

    async def load_workflows(self) -> list[WorkflowRecord]:
        return await self.list_workflows()

    async def pending_refs(self) -> list[PendingRef]:
        rows = sorted((e for e in self.executions.values() if e.state is State.CREATED), key=lambda e: e.seq)
        return [PendingRef.of(e) for e in rows]

    async def held(self) -> list[Held]:
        return self._held()

    async def flow_held(self) -> list[FlowRow]:
        return [
            FlowRow(e.execution_id, e.tenant, e.workflow.name, e.workflow.version, e.flow_keys)
            for e in self.executions.values()
            if e.state in HELD and e.flow_keys
        ]

    async def take_preemption(self, preemptor: str, now: float, stale_before: float) -> bool:
        row = self.executions.get(preemptor)
        if row is None or row.state is not State.CREATED:
            return False
        taken = self.preemptions.get(preemptor)
        if taken is not None and taken[0] != self.replica_id and taken[1] >= stale_before:
            return False  # another live replica acts for it
        self.preemptions[preemptor] = (self.replica_id, now)
        return True

    async def prune_preemptions(self, stale_before: float) -> None:
        self.preemptions = {
            preemptor: (replica, at)
            for preemptor, (replica, at) in self.preemptions.items()
            if at >= stale_before and (row := self.executions.get(preemptor)) and row.state is State.CREATED
        }

    async def prune_buckets(self) -> int:
        return 0  # no shared buckets here: each replica's rates are its own

    async def prune_dispatches(self, before: float, batch: int = 5000) -> int:
        # No transactions to keep short here: every batch goes at once, as PostgreSQL's loop ends.
        def old(key: tuple[str, int], at: float) -> bool:
            row = self.executions.get(key[0])
            return at < before and row is not None and row.state.finished and row.updated_at < before

        pruned = [key for key, at in self.dispatches.items() if old(key, at)]
        for key in pruned:
            del self.dispatches[key]
        return len(pruned)


class MemoryCluster:
    """The ``ClusterMembership`` of ``SharedMemoryStore``: its workers, and the others' in ``remote``.

    Other replicas never die here (the test plays them), so ``sweep`` finds nothing to requeue.
    """

    epochs: dict[str, int]

    def __init__(self, store: SharedMemoryStore) -> None:
        self.store = store
        self.epochs = {}
        self.address = ""
        self.remote: list[tuple[str, dict[str, Any]]] = []  # the directory: other replicas' workers
        self.published: dict[str, dict[str, Any]] = {}  # this replica's workers: connected, info, load
        self.paused: set[str] = set()
        self.heartbeats = 0
        self._epoch = 0

    def take(self, name: str) -> None:
        """A new ownership epoch for this replica's hold on ``name``."""
        self._epoch += 1
        self.epochs[name] = self._epoch

    def _known(self, name: str) -> bool:
        return name in self.store.workers or any(n == name for n, _ in self.remote)

    async def announce(self, address: str) -> None:
        self.address = address

    async def get_worker(self, name: str, replica_timeout: float) -> WorkerRecord | None:
        identity = self.store.workers.get(name)
        if identity is not None:
            connected = bool(self.published.get(name, {}).get("connected"))
            return WorkerRecord(name, identity.session_token, self.store.replica_id, connected, True)
        for other, info in self.remote:
            if other == name:  # its token is its replica's to know
                return WorkerRecord(name, "", info["replica"], True, True)
        return None

    async def adopt_worker(self, name: str, session_token: str) -> list[Execution]:
        self.remote = [(n, info) for n, info in self.remote if n != name]
        self.store.workers[name] = WorkerIdentity(name, session_token)
        self.take(name)
        held = [e for e in self.store.executions.values() if e.worker == name and e.state in HELD]
        self.store.owners.update((e.execution_id, self.store.replica_id) for e in held)
        return held

    async def give_back_worker(self, name: str, now: float, error: ExecutionError) -> list[Execution]:
        if name in self.published:
            self.published[name]["connected"] = False
        return self._requeue(name, now, error)

    async def forget_worker(self, name: str, now: float, error: ExecutionError) -> list[Execution] | None:
        known = self._known(name)
        self.store.workers.pop(name, None)
        self.published.pop(name, None)
        self.remote = [(n, info) for n, info in self.remote if n != name]
        rows = self._requeue(name, now, error)
        if not known and not rows:
            return None
        if known:
            self.take(name)  # tells the replica that held it to let go
        return rows

    async def owned(self) -> list[tuple[str, int]]:
        store = self.store
        return [
            (e.execution_id, e.generation)
            for e in store.executions.values()
            if e.state in HELD and store.owners.get(e.execution_id) == store.replica_id
        ]

    async def give_back_owned(
        self, rows: list[tuple[str, int]], now: float, error: ExecutionError
    ) -> list[Execution]:
        store, wanted = self.store, set(rows)
        return self._give_back(
            lambda e: (
                (e.execution_id, e.generation) in wanted
                and store.owners.get(e.execution_id) == store.replica_id
            ),
            now,
            error,
        )

    def _requeue(self, name: str, now: float, error: ExecutionError) -> list[Execution]:
        return self._give_back(lambda e: e.worker == name, now, error)

    def _give_back(
        self, which: Callable[[Execution], bool], now: float, error: ExecutionError
    ) -> list[Execution]:
        """As the SQL gives back rows: an unclaimed dispatch did not run (same attempt); running
        work did (the next attempt, or FAILED when none is left)."""
        rows = []
        for e in list(self.store.executions.values()):
            if e.state not in HELD or not which(e):
                continue
            if e.state is State.RUNNING and e.attempt >= e.max_attempts:
                row = e.evolve(state=State.FAILED, error=error, gpu_indices=(), updated_at=now)
            else:
                attempt = e.attempt + 1 if e.state is State.RUNNING else e.attempt
                row = e.evolve(
                    state=State.CREATED, attempt=attempt, worker="", gpu_indices=(), updated_at=now
                )
            self.store.executions[e.execution_id] = row
            self.store.owners.pop(e.execution_id, None)
            rows.append(row)
        return rows

    async def set_worker_connected(
        self, name: str, connected: bool, info: dict[str, Any] | None, load: dict[str, Any] | None
    ) -> None:
        if name not in self.store.workers:
            return  # not this replica's worker: its holder publishes it
        published = self.published.setdefault(name, {"info": {}, "load": {}})
        published["connected"] = connected
        published["info"] = info if info is not None else published["info"]
        published["load"] = load if load is not None else published["load"]

    async def set_worker_paused(self, name: str, paused: bool) -> bool:
        if not self._known(name):
            return False
        if paused:
            self.paused.add(name)
        else:
            self.paused.discard(name)
        return True

    async def worker_paused(self, name: str) -> bool:
        return name in self.paused

    async def directory(self, replica_timeout: float) -> list[tuple[str, dict[str, Any]]]:
        return list(self.remote)

    async def heartbeat(self, load: dict[str, dict[str, Any]]) -> None:
        self.heartbeats += 1
        for name, document in load.items():
            if name in self.published:
                self.published[name]["load"] = document

    async def sweep(self, dead_after: float, now: float) -> list[Execution]:
        return []
