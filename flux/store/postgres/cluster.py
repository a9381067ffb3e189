"""Cluster membership in PostgreSQL: replicas' heartbeats, the worker directory, adoption, the sweep.

The tables this owns (``workers``, ``replicas``) are defined here, beside the
SQL that reads them. Each replica publishes its connected workers' ``info``
(labels, capacity, software) and ``load`` (resources, reservations) as JSON;
flux/dispatcher/modes/shared/worker_documents.py writes and reads those documents.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from flux.domain.execution import Execution, ExecutionError
from flux.store.base import WorkerIdentity, WorkerRecord
from flux.store.postgres.rows import COLUMNS, announce, error_json
from flux.store.rows import CREATED, FAILED, RUNNING, SCHEDULED, execution_from_row

SWEEP_LOCK = 0x464C5559  # "FLUX"+1: one replica at a time sweeps the work of dead ones

MEMBERSHIP_SCHEMA = """
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

# Give back the dispatched and running rows of one worker (or of dead replicas):
# an unclaimed dispatch did not run (same attempt); running work did (next attempt,
# or FAILED when none is left).
_GIVE_BACK = f"""
UPDATE executions SET
    state = CASE WHEN state = {RUNNING} AND attempt >= max_attempts THEN {FAILED} ELSE {CREATED} END,
    attempt = CASE WHEN state = {RUNNING} AND attempt < max_attempts THEN attempt + 1 ELSE attempt END,
    error = CASE WHEN state = {RUNNING} AND attempt >= max_attempts THEN %(error)s ELSE error END,
    worker = CASE WHEN state = {RUNNING} AND attempt >= max_attempts THEN worker ELSE '' END,
    reason = CASE WHEN state = {RUNNING} AND attempt >= max_attempts THEN 'worker_lost' ELSE reason END,
    attempts = CASE WHEN state = {RUNNING} THEN (attempts::jsonb || jsonb_build_array(jsonb_build_array(
        attempt, worker, started_at, %(now)s, 'worker_lost', 'WorkerLost', 'its worker was lost')))::text
        ELSE attempts END,
    started_at = 0, gpu_indices = '[]', owner = '', updated_at = %(now)s
WHERE state IN ({SCHEDULED}, {RUNNING}) AND {{where}}
RETURNING {COLUMNS}
"""


class Membership:
    """The ``ClusterMembership`` of flux/store/shared.py, in this database."""

    # The ownership epoch of each worker as this replica last took it: a move announced
    # with an older epoch is stale (the worker has come back here since). Declared on the
    # class, so the members of ClusterMembership can be checked without a database.
    epochs: dict[str, int]

    def __init__(self, pool: AsyncConnectionPool[Any], replica_id: str):
        self._pool = pool
        self.replica_id = replica_id
        self.epochs = {}

    async def announce(self, address: str) -> None:
        """Record the address this replica serves on (known once its port is bound)."""
        async with self._pool.connection() as db:
            await db.execute("UPDATE replicas SET address = %s WHERE id = %s", (address, self.replica_id))

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
                f"UPDATE executions SET owner = %s WHERE worker = %s AND state IN ({SCHEDULED}, {RUNNING}) "
                f"RETURNING {COLUMNS}",
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
                {"name": name, "now": now, "error": error_json(error)},
            )
            rows = [execution_from_row(row) for row in await cursor.fetchall()]
            await db.execute("UPDATE workers SET connected = FALSE WHERE name = %s", (name,))
            await announce(db, rows)
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
                {"name": name, "now": now, "error": error_json(error)},
            )
            rows = [execution_from_row(r) for r in await cursor.fetchall()]
            if row is None and not rows:
                return None
            await announce(db, rows)
            if row is not None:
                await self._moved(db, name, row)
            return rows

    async def owned(self) -> list[tuple[str, int]]:
        """(execution id, generation) of every dispatched or running row this replica owns."""
        async with self._pool.connection() as db:
            cursor = await db.execute(
                f"SELECT execution_id, generation FROM executions "
                f"WHERE owner = %s AND state IN ({SCHEDULED}, {RUNNING})",
                (self.replica_id,),
            )
            return [(row[0], int(row[1])) for row in await cursor.fetchall()]

    async def give_back_owned(
        self, rows: list[tuple[str, int]], now: float, error: ExecutionError
    ) -> list[Execution]:
        """Requeue those of ``rows`` this replica still owns at that generation."""
        async with self._pool.connection() as db, db.transaction():
            cursor = db.cursor(row_factory=dict_row)
            await cursor.execute(
                _GIVE_BACK.format(
                    where="owner = %(me)s AND (execution_id, generation) IN "
                    "(SELECT * FROM unnest(%(ids)s::text[], %(generations)s::bigint[]))"
                ),
                {"me": self.replica_id, "ids": [i for i, _ in rows], "generations": [g for _, g in rows],
                 "now": now, "error": error_json(error)},
            )  # fmt: skip
            given = [execution_from_row(row) for row in await cursor.fetchall()]
            await announce(db, given)
            return given

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
                 "error": error_json(ExecutionError("WorkerLost", "its server replica stopped"))},
            )  # fmt: skip
            rows = [execution_from_row(row) for row in await cursor.fetchall()]
            await db.execute(
                "UPDATE workers SET connected = FALSE WHERE connected AND replica IN (SELECT id FROM replicas "
                "WHERE id <> %s AND heartbeat_at < now() - make_interval(secs => %s))",
                (self.replica_id, dead_after),
            )
            await announce(db, rows)
            return rows
