"""``PostgresStore``: the ``Store`` for replicas, and the calls only a shared database has.

The design is in this package's docstring (__init__.py); this class opens and
closes the database and does the one-off reads and writes. Execution rows and
claims go through the writer (writer.py), notices arrive through listener.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from flux.domain.execution import Execution, ExecutionError
from flux.domain.workflow import WorkflowRecord
from flux.store import notices
from flux.store.base import ExecutionQuery, Held, PendingRef, Recovered, Store, StoreError, WorkerIdentity
from flux.store.postgres.admin import AdminTables
from flux.store.postgres.batches import BatchTables
from flux.store.postgres.cluster import Membership
from flux.store.postgres.flow import held as flow_held
from flux.store.postgres.flow import prune_buckets
from flux.store.postgres.listener import Listener
from flux.store.postgres.quota import held as held_by_tenant
from flux.store.postgres.quota import prune_preemptions, take_preemption
from flux.store.postgres.rows import COLUMNS, announce, owned_row, redacted
from flux.store.postgres.schedules import PostgresSchedules
from flux.store.postgres.schema import migrate
from flux.store.postgres.waiting import fail_waiting
from flux.store.postgres.writer import Writer
from flux.store.rows import (
    CANCELLED,
    CREATED,
    EXECUTION_UPDATES,
    FAILED,
    FINISHED,
    WORKFLOW_COLUMN_COUNT,
    WORKFLOW_COLUMNS,
    execution_from_row,
    executions_filter,
    next_version,
    workflow_from_row,
    workflow_row,
    workflows_query,
)
from flux.store.shared import FlowGuard, FlowRow, QuotaGuard

# Advisory lock keys: see schema.py for the others, which must not collide with these.
WORKFLOWS_LOCK = 0x464C555A  # registrations take the next version one at a time
PRUNE_LOCK = 0x464C555B  # one replica at a time deletes old dispatches
# Dispatch rows one pruning transaction deletes at most: short transactions, short locks.
PRUNE_BATCH = 5000

# Retention: the dispatches of executions that finished before a cutoff. A finished execution
# was last written when it finished, after each of its dispatches, so the rows are old too:
# the index on ``at`` finds the candidates without reading the whole log.
_PRUNE = f"""
DELETE FROM dispatches WHERE (execution_id, generation) IN (
    SELECT d.execution_id, d.generation FROM dispatches d JOIN executions e USING (execution_id)
    WHERE d.at < %(before)s AND e.state >= {FINISHED} AND e.updated_at < %(before)s
    LIMIT %(batch)s)
"""

# How long a request waits for a pooled connection (seconds; psycopg_pool's default is 30).
# Past it the request is answered UNAVAILABLE, which callers retry: while PostgreSQL restarts
# they hear so in seconds, instead of their own deadline passing first.
POOL_WAIT = 5.0


class PostgresStore(AdminTables, BatchTables, PostgresSchedules, Store):
    """The ``Store`` of replicas, and the ``SharedStore`` their strategies use (flux/store/shared.py)."""

    # AdminShutdown (a restart), a connection dropped or refused, the pool's PoolTimeout.
    unavailable = (psycopg.OperationalError,)
    # Declared on the class, so the members of SharedStore can be checked without a database.
    replica_id: str
    cluster: Membership

    def __init__(self, url: str, replica_id: str, address: str = "", pool_size: int = 8):
        self.url = url
        self.replica_id = replica_id
        self.address = address
        self._pool = AsyncConnectionPool(
            url, min_size=2, max_size=pool_size, open=False, kwargs={"autocommit": True}, timeout=POOL_WAIT
        )
        self._writes = Writer(url, replica_id)
        self._listener = Listener(url)
        # Heartbeats, the worker directory, adoption and the sweep: the cluster's side of the database.
        self.cluster = Membership(self._pool, replica_id)

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
            await migrate(db)
            await db.execute(
                "INSERT INTO replicas (id, address) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE "
                "SET heartbeat_at = now(), address = excluded.address",
                (self.replica_id, self.address),
            )
        await self._writes.connect()
        await self._listener.start()
        recovered = Recovered(workflows=await self.load_workflows())
        recovered.unfinished = await self.pending_executions()
        # Sequence numbers order the shared queue: time-based, so replicas interleave fairly.
        recovered.next_seq = time.time_ns() // 1000
        return recovered

    async def close(self) -> None:
        await self._writes.drain()
        await self._listener.stop()
        with contextlib.suppress(Exception):
            async with self._pool.connection() as db:
                # The heartbeat is left to age: our workers get the grace period to move to
                # another replica and be adopted there before the sweep requeues their work.
                await db.execute(
                    "UPDATE workers SET connected = FALSE WHERE replica = %s", (self.replica_id,)
                )
        await self._writes.close()
        await self._listener.close()
        await self._pool.close()

    def subscribe(self, callback: Callable[[notices.Notice], None]) -> None:
        """Call ``callback`` with each notice another replica (or this one) sends."""
        self._listener.on_notify = callback

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
                record = next_version(workflow_from_row(row) if row else None, wf, source_hash, filename)
                if record.unchanged:
                    stored.append(record)
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
        return self._writes.save(execution)

    def save_many(self, executions: list[Execution]) -> asyncio.Future[None]:
        return self._writes.save_many(executions)

    def claim(
        self, dispatches: list[Execution], with_rows: bool = False
    ) -> asyncio.Future[dict[str, Execution]]:
        """Claim pending rows for these dispatches (SCHEDULED, on one of this replica's workers).

        Resolves with the rows won, by id, as stored; a row missing from the answer went to
        another replica or was cancelled. Claims ride the writer after the rows saved before them;
        ``with_rows``, in the same transaction as the next batch of rows (writer.py).
        """
        return self._writes.claim(dispatches, with_rows)

    @property
    def quota_guard(self) -> QuotaGuard | None:
        """Set while tenants have terms: each claim then admits only what quotas allow cluster-wide."""
        return self._writes.quota_guard

    @quota_guard.setter
    def quota_guard(self, guard: QuotaGuard | None) -> None:
        self._writes.quota_guard = guard

    @property
    def flow_guard(self) -> FlowGuard | None:
        """Set on replicas: each claim of limited work admits only what limits allow cluster-wide."""
        return self._writes.flow_guard

    @flow_guard.setter
    def flow_guard(self, guard: FlowGuard | None) -> None:
        self._writes.flow_guard = guard

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

    async def prune_buckets(self) -> int:
        async with self._pool.connection() as db, db.transaction():
            return await prune_buckets(db)

    async def insert_dispatched(self, execution: Execution) -> None:
        """Store a new execution already claimed by this replica (it was never pending); group-committed."""
        await self._writes.insert_dispatched(execution)

    async def reopen(self, execution: Execution) -> bool:
        row = owned_row(execution, "")
        columns = [c.strip() for c in COLUMNS.split(",")]
        updates = [c.strip() for c in EXECUTION_UPDATES.split(",")] + ["owner"]
        values = [row[columns.index(c)] for c in updates]
        async with self._pool.connection() as db, db.transaction():
            cursor = await db.execute(
                f"UPDATE executions SET {', '.join(f'{c} = %s' for c in updates)} "
                f"WHERE execution_id = %s AND state = {FAILED} RETURNING execution_id",
                (*values, execution.execution_id),
            )
            if await cursor.fetchone() is None:
                return False
            await announce(db, [execution])
            return True

    async def fail_waiting(
        self, execution_id: str, generation: int, reason: str, error: ExecutionError, now: float
    ) -> Execution | None:
        async with self._pool.connection() as db:
            return await fail_waiting(db, execution_id, generation, reason, error, now)

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

    async def cancel_many(self, execution_ids: list[str], now: float) -> list[Execution]:
        """``cancel`` for each (a batch's members), guarded the same way, in one transaction and
        three statements: one guarded update, and each channel's notifications at once. (A
        transaction a member, 500 side by side, took 47 s for 100,000 members.)"""
        if not execution_ids:
            return []
        async with self._pool.connection() as db, db.transaction():
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(
                f"UPDATE executions SET state = {CANCELLED}, updated_at = %s "
                f"WHERE execution_id = ANY(%s) AND state < {FINISHED} RETURNING {COLUMNS}",
                (now, list(execution_ids)),
            )
            rows = await cursor.fetchall()
            cancelled = [row["execution_id"] for row in rows]
            if cancelled:
                for channel in ("flux_cancel", "flux_done"):
                    await db.execute(
                        "SELECT pg_notify(%s, id) FROM unnest(%s::text[]) AS id", (channel, cancelled)
                    )
            return [execution_from_row(row) for row in rows]

    async def save_worker(self, identity: WorkerIdentity) -> None:
        await self.cluster.save_worker(identity)

    # ----------------------------------------------------------------- reads

    async def get_execution(self, execution_id: str) -> Execution | None:
        async with self._pool.connection() as db:
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(f"SELECT {COLUMNS} FROM executions WHERE execution_id=%s", (execution_id,))
            row = await cursor.fetchone()
            return execution_from_row(row) if row else None

    async def get_executions(self, execution_ids: list[str]) -> dict[str, Execution]:
        if not execution_ids:
            return {}
        async with self._pool.connection() as db:
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(
                f"SELECT {COLUMNS} FROM executions WHERE execution_id = ANY(%s)", (list(execution_ids),)
            )
            return {row["execution_id"]: execution_from_row(row) for row in await cursor.fetchall()}

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
            return await held_by_tenant(db, self.replica_id)

    async def flow_held(self) -> list[FlowRow]:
        """Every limited row a worker holds now, whichever replica's (see flow.py)."""
        async with self._pool.connection() as db:
            return await flow_held(db)

    async def take_preemption(self, preemptor: str, now: float, stale_before: float) -> bool:
        """Whether this replica may preempt for ``preemptor`` (see quota.py)."""
        async with self._pool.connection() as db:
            return await take_preemption(db, preemptor, self.replica_id, now, stale_before)

    async def prune_preemptions(self, stale_before: float) -> None:
        async with self._pool.connection() as db:
            await prune_preemptions(db, stale_before)

    async def pending_refs(self) -> list[PendingRef]:
        async with self._pool.connection() as db:
            cursor = await db.execute(
                "SELECT execution_id, seq, workflow_name, workflow_version, tenant, not_before, generation, "
                f"created_at, attempt, attempts NOT IN ('', '[]'), after_ids, after_when, waiting, "
                "CASE WHEN gang = '' THEN 0 ELSE (gang::json->>'size')::int END "
                f"FROM executions WHERE state = {CREATED} ORDER BY seq"
            )
            return [
                PendingRef(*row[:10], tuple(row[10].split()), *row[11:]) for row in await cursor.fetchall()
            ]
