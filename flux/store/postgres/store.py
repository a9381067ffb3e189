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

from flux.domain.execution import Execution, State
from flux.domain.workflow import WorkflowRecord
from flux.store import notices
from flux.store.base import (
    Conflict,
    ExecutionQuery,
    Held,
    PendingRef,
    Recovered,
    Store,
    StoreError,
    WorkerIdentity,
)
from flux.store.postgres import quota
from flux.store.postgres.cluster import MEMBERSHIP_SCHEMA, Membership
from flux.store.postgres.rows import COLUMN_COUNT, COLUMNS, announce
from flux.store.rows import (
    CANCELLED,
    CREATED,
    FINISHED,
    RUNNING,
    SCHEDULED,
    WORKFLOW_COLUMN_COUNT,
    WORKFLOW_COLUMNS,
    check_owner,
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
# 4: executions.trace (added on open; older rows get '', untraced).
# 5: executions.tenant (older rows are tenant 'default'), tenants and tokens.
# 6: workflows.tenant (older workflows are tenant 'default''s, shared by every tenant).
SCHEMA_VERSION = 6
# pg_advisory locks are keyed by a bigint; Flux's five are "FLUX" and the four after it
# (the second, SWEEP_LOCK, is cluster.py's; the fifth, QUOTA_LOCK, quota.py's).
MIGRATION_LOCK = 0x464C5558  # schema creation and migration, on open
WORKFLOWS_LOCK = 0x464C555A  # registrations take the next version one at a time
PRUNE_LOCK = 0x464C555B  # one replica at a time deletes old dispatches
# Dispatch rows one pruning transaction deletes at most: short transactions, short locks.
PRUNE_BATCH = 5000

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pools (name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    source_hash TEXT PRIMARY KEY, filename TEXT NOT NULL, source TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    name TEXT NOT NULL, version INTEGER NOT NULL, source_hash TEXT NOT NULL, entrypoint TEXT NOT NULL,
    requests TEXT NOT NULL, affinity TEXT NOT NULL, max_attempts INTEGER NOT NULL,
    created_at DOUBLE PRECISION NOT NULL, runtime TEXT NOT NULL DEFAULT 'python', PRIMARY KEY (name, version));
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS runtime TEXT NOT NULL DEFAULT 'python';
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS tenant TEXT NOT NULL DEFAULT 'default';
CREATE TABLE IF NOT EXISTS executions (
    execution_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, workflow_name TEXT NOT NULL,
    workflow_version INTEGER NOT NULL, source_hash TEXT NOT NULL, entrypoint TEXT NOT NULL,
    state SMALLINT NOT NULL, worker TEXT NOT NULL, attempt INTEGER NOT NULL, generation BIGINT NOT NULL,
    max_attempts INTEGER NOT NULL, input_json TEXT NOT NULL, output_json TEXT NOT NULL, error TEXT,
    gpu_indices TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    owner TEXT NOT NULL DEFAULT '');
ALTER TABLE executions ADD COLUMN IF NOT EXISTS priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS trace TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS tenant TEXT NOT NULL DEFAULT 'default';
CREATE TABLE IF NOT EXISTS tenants (name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    digest TEXT PRIMARY KEY, tenant TEXT NOT NULL, role TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS executions_pending ON executions (seq) WHERE state = {CREATED};
CREATE INDEX IF NOT EXISTS executions_held ON executions (worker) WHERE state IN ({SCHEDULED}, {RUNNING});
CREATE INDEX IF NOT EXISTS executions_owned ON executions (owner) WHERE state IN ({SCHEDULED}, {RUNNING});
CREATE INDEX IF NOT EXISTS executions_recent ON executions (seq);
CREATE INDEX IF NOT EXISTS executions_by_workflow ON executions (workflow_name, seq);
CREATE TABLE IF NOT EXISTS dispatches (
    execution_id TEXT NOT NULL, generation BIGINT NOT NULL, worker TEXT NOT NULL, replica TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL, PRIMARY KEY (execution_id, generation));
CREATE INDEX IF NOT EXISTS dispatches_at ON dispatches (at);
CREATE TABLE IF NOT EXISTS preemptions (
    preemptor TEXT PRIMARY KEY, replica TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
"""


# Insert a new execution, or update one this replica may write: the same
# generation, not finished, and either pending (shared) or owned by us.
_UPSERT = f"""
INSERT INTO executions ({COLUMNS}) VALUES ({",".join(["%s"] * COLUMN_COUNT)})
ON CONFLICT (execution_id) DO UPDATE SET
    state=excluded.state, worker=excluded.worker, attempt=excluded.attempt, output_json=excluded.output_json,
    error=excluded.error, gpu_indices=excluded.gpu_indices, updated_at=excluded.updated_at, owner=excluded.owner
WHERE executions.generation = excluded.generation AND executions.state < {FINISHED}
    AND (executions.state = {CREATED} OR executions.owner = %s)
RETURNING execution_id
"""

_CLAIM = f"""
WITH wanted AS (
    SELECT * FROM unnest(%(ids)s::text[], %(workers)s::text[], %(gpus)s::text[]) AS w(execution_id, worker, gpus)
), picked AS (
    SELECT e.execution_id, w.worker, w.gpus FROM executions e JOIN wanted w USING (execution_id)
    WHERE e.state = {CREATED} ORDER BY e.execution_id FOR UPDATE OF e SKIP LOCKED
), claimed AS (
    UPDATE executions e SET state = {SCHEDULED}, worker = p.worker, gpu_indices = p.gpus, owner = %(owner)s,
        generation = e.generation + 1, updated_at = %(now)s
    FROM picked p WHERE e.execution_id = p.execution_id
    RETURNING {", ".join("e." + c.strip() for c in COLUMNS.split(","))}
), logged AS (
    INSERT INTO dispatches SELECT execution_id, generation, worker, %(owner)s, %(now)s FROM claimed
)
SELECT * FROM claimed
"""

# Retention: the dispatches of executions that finished before a cutoff. A finished execution
# was last written when it finished, after each of its dispatches, so the rows are old too:
# the index on ``at`` finds the candidates without reading the whole log.
_PRUNE = f"""
DELETE FROM dispatches WHERE (execution_id, generation) IN (
    SELECT d.execution_id, d.generation FROM dispatches d JOIN executions e USING (execution_id)
    WHERE d.at < %(before)s AND e.state >= {FINISHED} AND e.updated_at < %(before)s
    LIMIT %(batch)s)
"""

# Claims and claim marks (RUNNING) commit without waiting for the WAL flush. If
# PostgreSQL itself crashes, such a commit can be lost, which is as if it never
# happened: the row is still pending, or still SCHEDULED, and the worker's result
# is refused by generation or redispatched, which at-least-once execution allows.
# Submissions, requeues and results always wait for the flush: they are promises.
_RELAXED = "SET LOCAL synchronous_commit = off"

# How long a request waits for a pooled connection (seconds; psycopg_pool's default is 30).
# Past it the request is answered UNAVAILABLE, which callers retry: while PostgreSQL restarts
# they hear so in seconds, instead of their own deadline passing first.
POOL_WAIT = 5.0


def _row(e: Execution, owner: str) -> tuple[object, ...]:
    held = e.state in (State.SCHEDULED, State.RUNNING)
    return (*execution_row(e), owner if held else "")


@dataclass(slots=True)
class _Claim:
    dispatches: list[Execution]
    now: float
    future: asyncio.Future[dict[str, Execution]]


class PostgresStore(Store):
    # AdminShutdown (a restart), a connection dropped or refused, the pool's PoolTimeout.
    unavailable = (psycopg.OperationalError,)

    def __init__(self, url: str, replica_id: str, address: str = "", pool_size: int = 8):
        self.url = url
        self.replica_id = replica_id
        self.address = address
        self._pool = AsyncConnectionPool(
            url, min_size=2, max_size=pool_size, open=False, kwargs={"autocommit": True}, timeout=POOL_WAIT
        )
        self._writer: psycopg.AsyncConnection[Any] | None = None
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._listen_task: asyncio.Task[None] | None = None
        self._on_notify: Callable[[notices.Notice], None] | None = None
        self._queued: dict[str, tuple[Execution, asyncio.Future[None]]] = {}
        self._claims: list[_Claim] = []
        self._flusher: asyncio.Task[None] | None = None
        # Heartbeats, the worker directory, adoption and the sweep: the cluster's side of the database.
        self.cluster = Membership(self._pool, replica_id)
        # Set while tenants have terms: each claim then admits only what quotas allow cluster-wide.
        self.quota_guard: quota.QuotaGuard | None = None

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
            await db.execute(MEMBERSHIP_SCHEMA)
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

    def subscribe(self, callback: Callable[[notices.Notice], None]) -> None:
        """Call ``callback`` with each notice another replica (or this one) sends."""
        self._on_notify = callback

    async def _subscribed(self) -> psycopg.AsyncConnection[Any]:
        listener = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        for channel in notices.CHANNELS:
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
                            self._on_notify(notices.parse(notice.channel, notice.payload))
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
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (WORKFLOWS_LOCK,))
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
                check_owner(latest, wf)
                version = (latest.version if latest else 0) + 1
                record = replace(wf, version=version, source_hash=source_hash, filename=filename)
                if latest is not None and latest.same_definition(record):
                    stored.append(replace(latest, filename=filename, unchanged=True))
                    continue
                await db.execute(
                    f"INSERT INTO workflows ({WORKFLOW_COLUMNS}) VALUES ({','.join(['%s'] * WORKFLOW_COLUMN_COUNT)})",
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
        return asyncio.shield(future)  # the caller's own (Store.save)

    def claim(self, dispatches: list[Execution]) -> asyncio.Future[dict[str, Execution]]:
        future: asyncio.Future[dict[str, Execution]] = asyncio.get_running_loop().create_future()
        self._claims.append(_Claim(dispatches, max((e.updated_at for e in dispatches), default=0.0), future))
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
            await announce(writer, written)
        return applied

    async def _settle_claims(self, claims: list[_Claim]) -> None:
        wanted = [e for claim in claims for e in claim.dispatches]
        try:
            writer = await self._writer_connection()
            async with writer.transaction():
                await writer.execute(_RELAXED)
                if self.quota_guard is not None:
                    refused = await quota.guarded(writer, self.replica_id, self.quota_guard, wanted)
                    wanted = [e for e in wanted if e.execution_id not in refused]
                ids = [e.execution_id for e in wanted]
                workers = [e.worker for e in wanted]
                gpus = [json.dumps(list(e.gpu_indices)) for e in wanted]
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
                claim.future.set_result(
                    {
                        e.execution_id: claimed[e.execution_id]
                        for e in claim.dispatches
                        if e.execution_id in claimed
                    }
                )

    async def prune_dispatches(self, before: float, batch: int = PRUNE_BATCH) -> int:
        """Delete the dispatch rows of executions finished before ``before`` (epoch seconds).

        In transactions of at most ``batch`` rows; returns how many went, 0 also when another
        replica is pruning right now.
        """
        pruned = 0
        while True:
            async with self._pool.connection() as db, db.transaction():
                locked = await (
                    await db.execute("SELECT pg_try_advisory_xact_lock(%s)", (PRUNE_LOCK,))
                ).fetchone()
                if not locked or not locked[0]:
                    return pruned
                deleted = max((await db.execute(_PRUNE, {"before": before, "batch": batch})).rowcount, 0)
            pruned += deleted
            if deleted < batch:
                return pruned

    async def insert_dispatched(self, execution: Execution) -> None:
        """Store a new execution already claimed by this replica (it was never pending)."""
        async with self._pool.connection() as db, db.transaction():
            await db.execute(
                f"INSERT INTO executions ({COLUMNS}) VALUES ({','.join(['%s'] * COLUMN_COUNT)})",
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
                f"UPDATE executions SET state = {CANCELLED}, updated_at = %s WHERE execution_id = %s AND state < {FINISHED} "
                f"RETURNING {COLUMNS}",
                (now, execution_id),
            )
            row = await cursor.fetchone()
            if row is None:
                return None
            await db.execute("SELECT pg_notify('flux_cancel', %s)", (execution_id,))
            await db.execute("SELECT pg_notify('flux_done', %s)", (execution_id,))
            return execution_from_row(row)

    async def save_worker(self, identity: WorkerIdentity) -> None:
        await self.cluster.save_worker(identity)

    async def save_pools(self, pools: list[tuple[str, str]]) -> None:
        now = time.time()
        async with self._pool.connection() as db, db.transaction():
            for name, spec in pools:
                await db.execute(
                    "INSERT INTO pools VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                    "spec = excluded.spec, updated_at = excluded.updated_at",
                    (name, spec, now),
                )

    async def list_pools(self) -> list[tuple[str, str]]:
        async with self._pool.connection() as db:
            cursor = await db.execute("SELECT name, spec FROM pools ORDER BY name")
            return [(row[0], row[1]) for row in await cursor.fetchall()]

    async def save_tenants(self, tenants: list[tuple[str, str]]) -> None:
        now = time.time()
        async with self._pool.connection() as db, db.transaction():
            for name, spec in tenants:
                await db.execute(
                    "INSERT INTO tenants VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                    "spec = excluded.spec, updated_at = excluded.updated_at",
                    (name, spec, now),
                )
            await db.execute("SELECT pg_notify('flux_tenants', %s)", (self.replica_id,))

    async def delete_tenant(self, name: str) -> bool:
        async with self._pool.connection() as db, db.transaction():
            cursor = await db.execute("DELETE FROM tenants WHERE name = %s", (name,))
            await db.execute("DELETE FROM tokens WHERE tenant = %s", (name,))
            await db.execute("SELECT pg_notify('flux_tenants', %s)", (self.replica_id,))
            return cursor.rowcount > 0

    async def list_tenants(self) -> list[tuple[str, str]]:
        async with self._pool.connection() as db:
            cursor = await db.execute("SELECT name, spec FROM tenants ORDER BY name")
            return [(row[0], row[1]) for row in await cursor.fetchall()]

    async def save_token(self, digest: str, tenant: str, role: str) -> None:
        async with self._pool.connection() as db:
            await db.execute(
                "INSERT INTO tokens VALUES (%s, %s, %s, %s)", (digest, tenant, role, time.time())
            )

    async def find_token(self, digest: str) -> tuple[str, str] | None:
        async with self._pool.connection() as db:
            cursor = await db.execute("SELECT tenant, role FROM tokens WHERE digest = %s", (digest,))
            row = await cursor.fetchone()
            return (row[0], row[1]) if row else None

    # ----------------------------------------------------------------- reads

    async def get_execution(self, execution_id: str) -> Execution | None:
        async with self._pool.connection() as db:
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(f"SELECT {COLUMNS} FROM executions WHERE execution_id=%s", (execution_id,))
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
                f"SELECT {COLUMNS} FROM executions {where} ORDER BY seq DESC, execution_id DESC LIMIT %s",
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
            await cursor.execute(f"SELECT {COLUMNS} FROM executions WHERE state = {CREATED} ORDER BY seq")
            return [execution_from_row(row) for row in await cursor.fetchall()]

    async def held(self) -> list[Held]:
        """What every tenant holds now (see quota.py)."""
        async with self._pool.connection() as db:
            return await quota.held(db, self.replica_id)

    async def take_preemption(self, preemptor: str, now: float, stale_before: float) -> bool:
        """Whether this replica may preempt for ``preemptor`` (see quota.py)."""
        async with self._pool.connection() as db:
            return await quota.take_preemption(db, preemptor, self.replica_id, now, stale_before)

    async def prune_preemptions(self, stale_before: float) -> None:
        async with self._pool.connection() as db:
            await quota.prune_preemptions(db, stale_before)

    async def pending_refs(self) -> list[PendingRef]:
        async with self._pool.connection() as db:
            cursor = await db.execute(
                "SELECT execution_id, seq, workflow_name, workflow_version, tenant FROM executions "
                f"WHERE state = {CREATED} ORDER BY seq"
            )
            return [PendingRef(*row) for row in await cursor.fetchall()]


def redacted(url: str) -> str:
    """A database URL without its password, for logs and errors."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"
