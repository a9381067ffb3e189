"""PostgreSQL store: one database shared by several server replicas.

What SQLite does with one process's memory, this does with the database:

- **Ownership.** A dispatched or running execution belongs to the replica its
  worker is connected to (``owner``). Every write of an owned row is guarded
  (same generation, not finished, still ours), so a replica that lost a row to
  another — its worker moved, it was presumed dead and swept, a client
  cancelled through another replica — learns it from a ``Conflict`` instead of
  overwriting newer state.
- **Claims.** Pending rows are shared. A replica dispatches only after
  ``claim`` moved the row to SCHEDULED under ``SELECT … FOR UPDATE SKIP
  LOCKED``, so two replicas never dispatch the same execution; each claim is
  logged in ``dispatches`` keyed by (execution, generation).
- **Wake-ups.** ``NOTIFY`` tells the other replicas about new pending work,
  cancellations, finished executions, moved workers and new workflows; a
  replica's safety tick rereads the queue in case one was missed.
- **Liveness.** Each replica heartbeats its row in ``replicas``; one live
  replica at a time (``pg_try_advisory_xact_lock``) sweeps the rows of
  replicas silent for longer than the grace period back into the queue.

Writes are batched as in SQLite: saves and claims made while a transaction is
in flight ride the next one, in order, on one writer connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from flux.domain.execution import Execution, ExecutionError, State
from flux.store.base import (
    Conflict,
    ExecutionQuery,
    PendingRef,
    Recovered,
    Store,
    StoreError,
    WorkerIdentity,
    WorkerRecord,
    WorkflowRecord,
)
from flux.store.rows import (
    EXECUTION_COLUMNS,
    WORKFLOW_COLUMNS,
    execution_from_row,
    execution_row,
    executions_filter,
    workflow_from_row,
    workflow_row,
    workflows_query,
)

log = logging.getLogger("flux.store.postgres")

# 2: workflows.runtime (added to a version 1 database on open).
# 3: workflows.priority and executions.priority (added on open; older rows get 0).
SCHEMA_VERSION = 3
# pg_advisory locks are keyed by a bigint; these two are Flux's ("FLUX" and "FLUX"+1).
MIGRATION_LOCK = 0x464C5558
SWEEP_LOCK = 0x464C5559
NOTIFY_LIMIT = 7000  # bytes per NOTIFY payload (PostgreSQL's limit is 8000)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    source_hash TEXT PRIMARY KEY, filename TEXT NOT NULL, source TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    name TEXT NOT NULL, version INTEGER NOT NULL, source_hash TEXT NOT NULL, entrypoint TEXT NOT NULL,
    requests TEXT NOT NULL, affinity TEXT NOT NULL, max_attempts INTEGER NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, runtime TEXT NOT NULL DEFAULT 'python', PRIMARY KEY (name, version));
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS runtime TEXT NOT NULL DEFAULT 'python';
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS priority INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS executions (
    execution_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, workflow_name TEXT NOT NULL,
    workflow_version INTEGER NOT NULL, source_hash TEXT NOT NULL, entrypoint TEXT NOT NULL,
    state SMALLINT NOT NULL, worker TEXT NOT NULL, attempt INTEGER NOT NULL, generation BIGINT NOT NULL,
    max_attempts INTEGER NOT NULL, input_json TEXT NOT NULL, output_json TEXT NOT NULL, error TEXT,
    gpu_indices TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    owner TEXT NOT NULL DEFAULT '');
ALTER TABLE executions ADD COLUMN IF NOT EXISTS priority INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS executions_pending ON executions (seq) WHERE state = 1;
CREATE INDEX IF NOT EXISTS executions_held ON executions (worker) WHERE state IN (2, 3);
CREATE INDEX IF NOT EXISTS executions_owned ON executions (owner) WHERE state IN (2, 3);
CREATE INDEX IF NOT EXISTS executions_recent ON executions (seq);
CREATE INDEX IF NOT EXISTS executions_by_workflow ON executions (workflow_name, seq);
CREATE TABLE IF NOT EXISTS dispatches (
    execution_id TEXT NOT NULL, generation BIGINT NOT NULL, worker TEXT NOT NULL, replica TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL, PRIMARY KEY (execution_id, generation));
CREATE TABLE IF NOT EXISTS workers (
    name TEXT PRIMARY KEY, session_token TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    replica TEXT NOT NULL DEFAULT '', connected BOOLEAN NOT NULL DEFAULT FALSE,
    epoch BIGINT NOT NULL DEFAULT 0, info TEXT NOT NULL DEFAULT '{}', load TEXT NOT NULL DEFAULT '{}');
ALTER TABLE workers ADD COLUMN IF NOT EXISTS paused BOOLEAN NOT NULL DEFAULT FALSE;
CREATE SEQUENCE IF NOT EXISTS worker_epochs;
CREATE TABLE IF NOT EXISTS replicas (
    id TEXT PRIMARY KEY, address TEXT NOT NULL, started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now());
"""

_COLUMNS = f"{EXECUTION_COLUMNS}, owner"

# Insert a new execution, or update one this replica may write: the same
# generation, not finished, and either pending (shared) or owned by us.
_UPSERT = f"""
INSERT INTO executions ({_COLUMNS}) VALUES ({",".join(["%s"] * 19)})
ON CONFLICT (execution_id) DO UPDATE SET
    state=excluded.state, worker=excluded.worker, attempt=excluded.attempt, output_json=excluded.output_json,
    error=excluded.error, gpu_indices=excluded.gpu_indices, updated_at=excluded.updated_at, owner=excluded.owner
WHERE executions.generation = excluded.generation AND executions.state < 4
    AND (executions.state = 1 OR executions.owner = %s)
RETURNING execution_id
"""

_CLAIM = f"""
WITH wanted AS (
    SELECT * FROM unnest(%(ids)s::text[], %(workers)s::text[], %(gpus)s::text[]) AS w(execution_id, worker, gpus)
), picked AS (
    SELECT e.execution_id, w.worker, w.gpus FROM executions e JOIN wanted w USING (execution_id)
    WHERE e.state = 1 ORDER BY e.execution_id FOR UPDATE OF e SKIP LOCKED
), claimed AS (
    UPDATE executions e SET state = 2, worker = p.worker, gpu_indices = p.gpus, owner = %(owner)s,
        generation = e.generation + 1, updated_at = %(now)s
    FROM picked p WHERE e.execution_id = p.execution_id
    RETURNING {", ".join("e." + c.strip() for c in _COLUMNS.split(","))}
), logged AS (
    INSERT INTO dispatches SELECT execution_id, generation, worker, %(owner)s, %(now)s FROM claimed
)
SELECT * FROM claimed
"""

# Give back the dispatched and running rows of one worker (or of dead replicas):
# an unclaimed dispatch did not run (same attempt); running work did (next attempt,
# or FAILED when none is left).
_GIVE_BACK = f"""
UPDATE executions SET
    state = CASE WHEN state = 3 AND attempt >= max_attempts THEN 5 ELSE 1 END,
    attempt = CASE WHEN state = 3 AND attempt < max_attempts THEN attempt + 1 ELSE attempt END,
    error = CASE WHEN state = 3 AND attempt >= max_attempts THEN %(error)s ELSE error END,
    worker = CASE WHEN state = 3 AND attempt >= max_attempts THEN worker ELSE '' END,
    gpu_indices = '[]', owner = '', updated_at = %(now)s
WHERE state IN (2, 3) AND {{where}}
RETURNING {_COLUMNS}
"""

# Claims and claim marks (RUNNING) commit without waiting for the WAL flush. If
# PostgreSQL itself crashes, such a commit can be lost, which is as if it never
# happened: the row is still pending, or still SCHEDULED, and the worker's result
# is refused by generation or redispatched, which at-least-once execution allows.
# Submissions, requeues and results always wait for the flush: they are promises.
_RELAXED = "SET LOCAL synchronous_commit = off"

CHANNELS = ("flux_pending", "flux_cancel", "flux_done", "flux_workers", "flux_workflows", "flux_paused")


def _row(e: Execution, owner: str) -> tuple[object, ...]:
    held = e.state in (State.SCHEDULED, State.RUNNING)
    return (*execution_row(e), owner if held else "")


def _pending_line(e: Execution) -> str:
    return f"{e.execution_id} {e.seq} {e.workflow.version} {e.workflow.name}"


def parse_pending(payload: str) -> list[PendingRef]:
    refs = []
    for line in payload.splitlines():
        execution_id, seq, version, name = line.split(" ", 3)
        refs.append(PendingRef(execution_id, int(seq), name, int(version)))
    return refs


def _chunks(lines: Iterable[str]) -> Iterable[str]:
    """Newline-joined payloads, each under PostgreSQL's NOTIFY size limit."""
    chunk: list[str] = []
    size = 0
    for line in lines:
        if chunk and size + len(line) + 1 > NOTIFY_LIMIT:
            yield "\n".join(chunk)
            chunk, size = [], 0
        chunk.append(line)
        size += len(line) + 1
    if chunk:
        yield "\n".join(chunk)


@dataclass(slots=True)
class _Claim:
    dispatches: list[tuple[str, str, tuple[int, ...]]]
    now: float
    future: asyncio.Future[dict[str, Execution]]


class PostgresStore(Store):
    shared = True

    def __init__(self, url: str, replica_id: str, address: str = "", pool_size: int = 8):
        self.url = url
        self.replica_id = replica_id
        self.address = address
        self._pool = AsyncConnectionPool(
            url, min_size=2, max_size=pool_size, open=False, kwargs={"autocommit": True}
        )
        self._writer: psycopg.AsyncConnection[Any] | None = None
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._listen_task: asyncio.Task[None] | None = None
        self._on_notify: Callable[[str, str], None] | None = None
        self._queued: dict[str, tuple[Execution, asyncio.Future[None]]] = {}
        self._claims: list[_Claim] = []
        self._flusher: asyncio.Task[None] | None = None
        # The ownership epoch of each worker as this replica last took it: a move announced
        # with an older epoch is stale (the worker has come back here since).
        self.epochs: dict[str, int] = {}

    # ----------------------------------------------------------------- lifecycle

    async def open(self) -> Recovered:
        try:
            psycopg.conninfo.conninfo_to_dict(self.url)
        except psycopg.Error as exc:
            raise StoreError(f"--db {redacted(self.url)} is not a PostgreSQL URL: {exc}") from None
        try:
            # One plain connection first: its error says why (the pool's only says it timed out).
            probe = await psycopg.AsyncConnection.connect(self.url, connect_timeout=10)
            await probe.close()
            await self._pool.open(wait=True, timeout=10)
        except Exception as exc:
            reason = str(exc).strip().replace("\n", " ")
            raise StoreError(f"could not connect to PostgreSQL at {redacted(self.url)}: {reason}") from None
        async with self._pool.connection() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            await db.execute(SCHEMA)
            found = await (await db.execute("SELECT value FROM meta WHERE key='schema_version'")).fetchone()
            if found is not None and int(found[0]) > SCHEMA_VERSION:
                raise StoreError(
                    f"the database has schema version {found[0]}, newer than this Flux ({SCHEMA_VERSION})"
                )
            await db.execute(
                "INSERT INTO meta VALUES ('schema_version', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )
            await db.execute(
                "INSERT INTO replicas (id, address) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE "
                "SET heartbeat_at = now(), address = excluded.address",
                (self.replica_id, self.address),
            )
        self._writer = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        self._listener = await self._subscribed()
        self._listen_task = asyncio.get_running_loop().create_task(self._listen())
        recovered = Recovered(workflows=await self.load_workflows())
        recovered.unfinished = await self.pending_executions()
        # Sequence numbers order the shared queue: time-based, so replicas interleave fairly.
        recovered.next_seq = time.time_ns() // 1000
        return recovered

    async def close(self) -> None:
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        if self._listen_task is not None:
            self._listen_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listen_task
        with contextlib.suppress(Exception):
            async with self._pool.connection() as db:
                # The heartbeat is left to age: our workers get the grace period to move to
                # another replica and be adopted there before the sweep requeues their work.
                await db.execute(
                    "UPDATE workers SET connected = FALSE WHERE replica = %s", (self.replica_id,)
                )
        for conn in (self._writer, self._listener):
            if conn is not None:
                await conn.close()
        await self._pool.close()

    async def announce(self, address: str) -> None:
        """Record the address this replica serves on (known once its port is bound)."""
        self.address = address
        async with self._pool.connection() as db:
            await db.execute("UPDATE replicas SET address = %s WHERE id = %s", (address, self.replica_id))

    def subscribe(self, callback: Callable[[str, str], None]) -> None:
        self._on_notify = callback

    async def _subscribed(self) -> psycopg.AsyncConnection[Any]:
        listener = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        for channel in CHANNELS:
            await listener.execute(f"LISTEN {channel}")
        return listener

    async def _listen(self) -> None:
        while True:
            try:
                if self._listener is None or self._listener.closed:
                    self._listener = await self._subscribed()
                async for notice in self._listener.notifies():
                    if self._on_notify is not None:
                        try:
                            self._on_notify(notice.channel, notice.payload)
                        except Exception:  # one bad notification must not stop the rest
                            log.exception("handling a %s notification failed", notice.channel)
            except psycopg.OperationalError as exc:
                # The database went away: listen again once it is back. What was announced
                # meanwhile is found by the replicas' safety tick, which rereads the queue.
                log.warning("lost the LISTEN connection (%s); reconnecting", exc)
                if self._listener is not None:
                    await self._listener.close()
                self._listener = None
                await asyncio.sleep(1.0)

    async def _writer_connection(self) -> psycopg.AsyncConnection[Any]:
        """The writer, reconnected if the database dropped it (a failed batch has told its callers)."""
        if self._writer is None or self._writer.closed or self._writer.broken:
            if self._writer is not None:
                await self._writer.close()
            self._writer = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        return self._writer

    # ----------------------------------------------------------------- workflows

    async def register_workflows(
        self, filename: str, source: str, source_hash: str, workflows: list[WorkflowRecord]
    ) -> list[WorkflowRecord]:
        now, stored = time.time(), []
        async with self._pool.connection() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK + 2,))
            await db.execute(
                "INSERT INTO sources VALUES (%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                (source_hash, filename, source, now),
            )
            cursor = db.cursor(row_factory=dict_row)
            for wf in workflows:
                await cursor.execute(
                    "SELECT * FROM workflows WHERE name=%s ORDER BY version DESC LIMIT 1", (wf.name,)
                )
                row = await cursor.fetchone()
                latest = workflow_from_row(row) if row else None
                version = (latest.version if latest else 0) + 1
                record = replace(wf, version=version, source_hash=source_hash, filename=filename)
                if latest is not None and latest.same_definition(record):
                    stored.append(replace(latest, filename=filename, unchanged=True))
                    continue
                await db.execute(
                    f"INSERT INTO workflows ({WORKFLOW_COLUMNS}) VALUES ({','.join(['%s'] * 10)})",
                    workflow_row(record, now),
                )
                stored.append(replace(record, registered_at=now))
            await db.execute("SELECT pg_notify('flux_workflows', %s)", (self.replica_id,))
        return stored

    async def load_workflows(self) -> list[WorkflowRecord]:
        async with self._pool.connection() as db:
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute("SELECT * FROM workflows ORDER BY name, version")
            return [workflow_from_row(row) for row in await cursor.fetchall()]

    async def get_source(self, source_hash: str) -> tuple[str, str] | None:
        async with self._pool.connection() as db:
            row = await (
                await db.execute("SELECT filename, source FROM sources WHERE source_hash=%s", (source_hash,))
            ).fetchone()
            return (row[0], row[1]) if row else None

    # ----------------------------------------------------------------- writes

    def save(self, execution: Execution) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        previous = self._queued.get(execution.execution_id)
        # The latest row of an execution wins within a batch; its callers share one answer.
        future = previous[1] if previous is not None else loop.create_future()
        self._queued[execution.execution_id] = (execution, future)
        self._kick()
        return future

    def claim(
        self, dispatches: list[tuple[str, str, tuple[int, ...]]], now: float
    ) -> asyncio.Future[dict[str, Execution]]:
        future: asyncio.Future[dict[str, Execution]] = asyncio.get_running_loop().create_future()
        self._claims.append(_Claim(dispatches, now, future))
        self._kick()
        return future

    def _kick(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        # Saves before claims: a requeue queued before a claim of the same row must land first.
        while self._queued or self._claims:
            if self._queued:
                batch, self._queued = self._queued, {}
                await self._settle(batch.values(), self._write(batch))
            if self._claims:
                claims, self._claims = self._claims, []
                await self._settle_claims(claims)

    async def _settle(self, batch: Iterable[tuple[Execution, asyncio.Future[None]]], work: Any) -> None:
        entries = list(batch)
        try:
            applied: set[str] = await work
        except BaseException as exc:  # the callers learn of it; nothing is silently dropped
            for _, future in entries:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise
            return
        for execution, future in entries:
            if future.done():
                continue
            if execution.execution_id in applied:
                future.set_result(None)
            else:
                future.set_exception(Conflict(execution.execution_id))

    async def _write(self, batch: dict[str, tuple[Execution, asyncio.Future[None]]]) -> set[str]:
        writer = await self._writer_connection()
        executions = [e for e, _ in batch.values()]
        applied: set[str] = set()
        async with writer.transaction():
            if all(e.state is State.RUNNING for e in executions):
                await writer.execute(_RELAXED)
            async with writer.cursor() as cursor:
                await cursor.executemany(
                    _UPSERT,
                    [(*_row(e, self.replica_id), self.replica_id) for e in executions],
                    returning=True,
                )
                while True:
                    for row in await cursor.fetchall():
                        applied.add(row[0])
                    if not cursor.nextset():
                        break
            written = [e for e in executions if e.execution_id in applied]
            await self._announce(writer, written)
        return applied

    async def _announce(self, db: psycopg.AsyncConnection[Any], written: list[Execution]) -> None:
        """Tell every replica (on commit) which rows became pending and which finished."""
        pending = [e for e in written if e.state is State.CREATED]
        done = [e for e in written if e.state.finished]
        for payload in _chunks(_pending_line(e) for e in pending):
            await db.execute("SELECT pg_notify('flux_pending', %s)", (payload,))
        for payload in _chunks(e.execution_id for e in done):
            await db.execute("SELECT pg_notify('flux_done', %s)", (payload,))

    async def _settle_claims(self, claims: list[_Claim]) -> None:
        ids, workers, gpus = [], [], []
        for claim in claims:
            for execution_id, worker, indices in claim.dispatches:
                ids.append(execution_id)
                workers.append(worker)
                gpus.append(json.dumps(list(indices)))
        try:
            writer = await self._writer_connection()
            async with writer.transaction():
                await writer.execute(_RELAXED)
                cursor = writer.cursor(row_factory=dict_row)
                await cursor.execute(
                    _CLAIM,
                    {"ids": ids, "workers": workers, "gpus": gpus, "owner": self.replica_id,
                     "now": claims[-1].now},
                )  # fmt: skip
                claimed = {row["execution_id"]: execution_from_row(row) for row in await cursor.fetchall()}
        except Exception as exc:
            for claim in claims:
                if not claim.future.done():
                    claim.future.set_exception(exc)
            return
        for claim in claims:
            if not claim.future.done():
                claim.future.set_result({i: claimed[i] for i, _, _ in claim.dispatches if i in claimed})

    async def insert_dispatched(self, execution: Execution) -> None:
        """Store a new execution already claimed by this replica (it was never pending)."""
        async with self._pool.connection() as db, db.transaction():
            await db.execute(
                f"INSERT INTO executions ({_COLUMNS}) VALUES ({','.join(['%s'] * 19)})",
                _row(execution, self.replica_id),
            )
            await db.execute(
                "INSERT INTO dispatches VALUES (%s,%s,%s,%s,%s)",
                (execution.execution_id, execution.generation, execution.worker, self.replica_id,
                 execution.updated_at),
            )  # fmt: skip

    async def cancel(self, execution_id: str, now: float) -> Execution | None:
        """Cancel an unfinished execution wherever it is; None when it is finished or unknown."""
        async with self._pool.connection() as db, db.transaction():
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(
                f"UPDATE executions SET state = 6, updated_at = %s WHERE execution_id = %s AND state < 4 "
                f"RETURNING {_COLUMNS}",
                (now, execution_id),
            )
            row = await cursor.fetchone()
            if row is None:
                return None
            await db.execute("SELECT pg_notify('flux_cancel', %s)", (execution_id,))
            await db.execute("SELECT pg_notify('flux_done', %s)", (execution_id,))
            return execution_from_row(row)

    # ----------------------------------------------------------------- reads

    async def get_execution(self, execution_id: str) -> Execution | None:
        async with self._pool.connection() as db:
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(f"SELECT {_COLUMNS} FROM executions WHERE execution_id=%s", (execution_id,))
            row = await cursor.fetchone()
            return execution_from_row(row) if row else None

    async def get_input(self, execution_id: str) -> str | None:
        async with self._pool.connection() as db:
            cursor = await db.execute(
                "SELECT input_json FROM executions WHERE execution_id=%s", (execution_id,)
            )
            row = await cursor.fetchone()
            return row[0] if row else None

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        where, params = executions_filter(query, "%s")
        async with self._pool.connection() as db:
            cursor = db.cursor(row_factory=dict_row)
            # The page token's "execution_id <" uses the column's collation, as this ORDER BY does.
            await cursor.execute(
                f"SELECT {_COLUMNS} FROM executions {where} ORDER BY seq DESC, execution_id DESC LIMIT %s",
                (*params, query.limit),
            )
            return [execution_from_row(row) for row in await cursor.fetchall()]

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        async with self._pool.connection() as db:
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(*workflows_query(name, "%s"))
            return [workflow_from_row(row) for row in await cursor.fetchall()]

    async def pending_executions(self) -> list[Execution]:
        async with self._pool.connection() as db:
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(f"SELECT {_COLUMNS} FROM executions WHERE state = 1 ORDER BY seq")
            return [execution_from_row(row) for row in await cursor.fetchall()]

    async def pending_refs(self) -> list[PendingRef]:
        async with self._pool.connection() as db:
            cursor = await db.execute(
                "SELECT execution_id, seq, workflow_name, workflow_version FROM executions "
                "WHERE state = 1 ORDER BY seq"
            )
            return [PendingRef(*row) for row in await cursor.fetchall()]

    # ----------------------------------------------------------------- workers

    async def save_worker(self, identity: WorkerIdentity) -> None:
        async with self._pool.connection() as db, db.transaction():
            row = await (
                await db.execute(
                    "INSERT INTO workers (name, session_token, updated_at, replica, epoch) "
                    "VALUES (%s,%s,%s,%s,nextval('worker_epochs')) "
                    "ON CONFLICT (name) DO UPDATE SET session_token=excluded.session_token, "
                    "updated_at=excluded.updated_at, replica=excluded.replica, epoch=excluded.epoch "
                    "RETURNING epoch",
                    (identity.name, identity.session_token, time.time(), self.replica_id),
                )
            ).fetchone()
            await self._moved(db, identity.name, row)

    async def _moved(self, db: psycopg.AsyncConnection[Any], name: str, row: Any) -> None:
        epoch = int(row[0]) if row else 0
        self.epochs[name] = epoch
        await db.execute("SELECT pg_notify('flux_workers', %s)", (f"{self.replica_id} {epoch} {name}",))

    async def get_worker(self, name: str, replica_timeout: float) -> WorkerRecord | None:
        async with self._pool.connection() as db:
            row = await (
                await db.execute(
                    "SELECT w.session_token, w.replica, w.connected, "
                    "r.heartbeat_at > now() - make_interval(secs => %s) AS alive, "
                    "w.updated_at, extract(epoch FROM r.heartbeat_at) "
                    "FROM workers w LEFT JOIN replicas r ON r.id = w.replica WHERE w.name = %s",
                    (replica_timeout, name),
                )
            ).fetchone()
            if row is None:
                return None
            # A dropped stream was marked at once; one whose replica died went with its last heartbeat.
            gone_since = float(row[4]) if not row[2] or row[5] is None else float(row[5])
            return WorkerRecord(name, row[0], row[1], bool(row[2]), bool(row[3]), gone_since)

    async def adopt_worker(self, name: str, session_token: str) -> list[Execution]:
        """Take over a worker that moved here: its row and the executions it holds."""
        async with self._pool.connection() as db, db.transaction():
            row = await (
                await db.execute(
                    "UPDATE workers SET replica = %s, session_token = %s, updated_at = %s, "
                    "epoch = nextval('worker_epochs') WHERE name = %s RETURNING epoch",
                    (self.replica_id, session_token, time.time(), name),
                )
            ).fetchone()
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(
                f"UPDATE executions SET owner = %s WHERE worker = %s AND state IN (2, 3) RETURNING {_COLUMNS}",
                (self.replica_id, name),
            )
            held = [execution_from_row(r) for r in await cursor.fetchall()]
            await self._moved(db, name, row)
            return held

    async def give_back_worker(self, name: str, now: float, error: ExecutionError) -> list[Execution]:
        """Requeue what a replaced worker held, wherever it was connected."""
        async with self._pool.connection() as db, db.transaction():
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(
                _GIVE_BACK.format(where="worker = %(name)s"),
                {"name": name, "now": now, "error": _error_json(error)},
            )
            rows = [execution_from_row(row) for row in await cursor.fetchall()]
            await db.execute("UPDATE workers SET connected = FALSE WHERE name = %s", (name,))
            await self._announce(db, rows)
            return rows

    async def forget_worker(self, name: str, now: float, error: ExecutionError) -> list[Execution] | None:
        """Drop a worker wherever it is: requeue what it held, delete its row, and tell the
        replica holding it to let go (a new epoch). None when no such worker is known."""
        async with self._pool.connection() as db, db.transaction():
            row = await (
                await db.execute(
                    "DELETE FROM workers WHERE name = %s RETURNING nextval('worker_epochs')", (name,)
                )
            ).fetchone()
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(
                _GIVE_BACK.format(where="worker = %(name)s"),
                {"name": name, "now": now, "error": _error_json(error)},
            )
            rows = [execution_from_row(r) for r in await cursor.fetchall()]
            if row is None and not rows:
                return None
            await self._announce(db, rows)
            if row is not None:
                await self._moved(db, name, row)
            return rows

    async def set_worker_connected(
        self, name: str, connected: bool, info: dict[str, Any] | None, load: dict[str, Any] | None
    ) -> None:
        async with self._pool.connection() as db:
            await db.execute(
                "UPDATE workers SET connected = %s, info = COALESCE(%s, info), load = COALESCE(%s, load), "
                "updated_at = %s WHERE name = %s AND replica = %s",
                (connected, json.dumps(info) if info is not None else None,
                 json.dumps(load) if load is not None else None, time.time(), name, self.replica_id),
            )  # fmt: skip

    async def set_worker_paused(self, name: str, paused: bool) -> bool:
        """Record an operator's pause by worker name and tell the replicas; False when no such worker."""
        async with self._pool.connection() as db, db.transaction():
            row = await (
                await db.execute(
                    "UPDATE workers SET paused = %s WHERE name = %s RETURNING name", (paused, name)
                )
            ).fetchone()
            if row is not None:
                await db.execute("SELECT pg_notify('flux_paused', %s)", (name,))
            return row is not None

    async def worker_paused(self, name: str) -> bool:
        async with self._pool.connection() as db:
            row = await (await db.execute("SELECT paused FROM workers WHERE name = %s", (name,))).fetchone()
            return bool(row and row[0])

    async def directory(self, replica_timeout: float) -> list[tuple[str, dict[str, Any]]]:
        """Workers connected to other live replicas, with what they last advertised."""
        async with self._pool.connection() as db:
            cursor = await db.execute(
                "SELECT w.name, w.info, w.load, w.replica FROM workers w JOIN replicas r ON r.id = w.replica "
                "WHERE w.connected AND w.replica <> %s AND r.heartbeat_at > now() - make_interval(secs => %s)",
                (self.replica_id, replica_timeout),
            )
            return [
                (row[0], {**json.loads(row[1]), **json.loads(row[2]), "replica": row[3]})
                for row in await cursor.fetchall()
            ]

    # ----------------------------------------------------------------- liveness

    async def heartbeat(self, load: dict[str, dict[str, Any]]) -> None:
        """Prove this replica alive and publish its workers' current load."""
        async with self._pool.connection() as db, db.transaction():
            await db.execute("UPDATE replicas SET heartbeat_at = now() WHERE id = %s", (self.replica_id,))
            if load:
                await db.execute(
                    "UPDATE workers w SET load = d.load FROM unnest(%s::text[], %s::text[]) AS d(name, load) "
                    "WHERE w.name = d.name AND w.replica = %s",
                    (list(load), [json.dumps(v) for v in load.values()], self.replica_id),
                )

    async def sweep(self, dead_after: float, now: float) -> list[Execution]:
        """If no other replica is sweeping, requeue the work owned by replicas silent for ``dead_after``."""
        async with self._pool.connection() as db, db.transaction():
            locked = await (
                await db.execute("SELECT pg_try_advisory_xact_lock(%s)", (SWEEP_LOCK,))
            ).fetchone()
            if not locked or not locked[0]:
                return []
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(
                _GIVE_BACK.format(
                    where="owner IN (SELECT id FROM replicas WHERE id <> %(me)s "
                    "AND heartbeat_at < now() - make_interval(secs => %(after)s))"
                ),
                {"me": self.replica_id, "after": dead_after, "now": now,
                 "error": _error_json(ExecutionError("WorkerLost", "its server replica stopped"))},
            )  # fmt: skip
            rows = [execution_from_row(row) for row in await cursor.fetchall()]
            await db.execute(
                "UPDATE workers SET connected = FALSE WHERE connected AND replica IN (SELECT id FROM replicas "
                "WHERE id <> %s AND heartbeat_at < now() - make_interval(secs => %s))",
                (self.replica_id, dead_after),
            )
            await self._announce(db, rows)
            return rows


def _error_json(error: ExecutionError) -> str:
    return json.dumps([error.type, error.message, error.traceback])


def redacted(url: str) -> str:
    """A database URL without its password, for logs and errors."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"
