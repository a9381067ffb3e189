"""SQLite store: the embedded default, one file under ``./.flux/`` in WAL mode.

All database work runs on one dedicated thread, so the event loop never
blocks on disk and SQLite never sees two writers. ``synchronous=NORMAL`` in
WAL mode survives any process crash (a committed transaction is in the WAL
file before the call returns); only a power loss can drop the last commits,
which is the usual trade for an embedded default.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from flux.domain.execution import Execution
from flux.domain.workflow import WorkflowRecord
from flux.store.base import ExecutionQuery, Recovered, Store, StoreError, WorkerIdentity
from flux.store.group_commit import GroupCommit
from flux.store.rows import (
    EXECUTION_COLUMNS,
    FINISHED,
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

# 2: workflows.runtime (a version 1 file is migrated on open).
# 3: workflows.priority and executions.priority (older files are migrated on open; rows get 0).
# 4: executions.trace (migrated on open; older rows get '', untraced).
# 5: executions.tenant (older rows are tenant 'default'), tenants and tokens.
# 6: workflows.tenant (older workflows are tenant 'default''s, shared by every tenant).
SCHEMA_VERSION = 6

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    source_hash TEXT PRIMARY KEY, filename TEXT NOT NULL, source TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    name TEXT NOT NULL, version INTEGER NOT NULL, source_hash TEXT NOT NULL, entrypoint TEXT NOT NULL,
    requests TEXT NOT NULL, affinity TEXT NOT NULL, max_attempts INTEGER NOT NULL, created_at REAL NOT NULL,
    runtime TEXT NOT NULL DEFAULT 'python', priority INTEGER NOT NULL DEFAULT 0,
    tenant TEXT NOT NULL DEFAULT 'default', PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS executions (
    execution_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, workflow_name TEXT NOT NULL,
    workflow_version INTEGER NOT NULL, source_hash TEXT NOT NULL, entrypoint TEXT NOT NULL,
    state INTEGER NOT NULL, worker TEXT NOT NULL, attempt INTEGER NOT NULL, generation INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL, input_json TEXT NOT NULL, output_json TEXT NOT NULL, error TEXT,
    gpu_indices TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0, trace TEXT NOT NULL DEFAULT '', tenant TEXT NOT NULL DEFAULT 'default');
CREATE INDEX IF NOT EXISTS executions_unfinished ON executions (state) WHERE state < {FINISHED};
CREATE INDEX IF NOT EXISTS executions_recent ON executions (seq);
CREATE INDEX IF NOT EXISTS executions_by_workflow ON executions (workflow_name, seq);
CREATE TABLE IF NOT EXISTS workers (name TEXT PRIMARY KEY, session_token TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS pools (name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    digest TEXT PRIMARY KEY, tenant TEXT NOT NULL, role TEXT NOT NULL, created_at REAL NOT NULL);
"""

_UPSERT = f"""
INSERT INTO executions ({EXECUTION_COLUMNS}) VALUES ({",".join(["?"] * (EXECUTION_COLUMNS.count(",") + 1))})
ON CONFLICT (execution_id) DO UPDATE SET
    state=excluded.state, worker=excluded.worker, attempt=excluded.attempt, generation=excluded.generation,
    output_json=excluded.output_json, error=excluded.error, gpu_indices=excluded.gpu_indices,
    updated_at=excluded.updated_at
"""


class SqliteStore(Store):
    # "database is locked" past the busy timeout, a disk I/O error, a file that went away.
    unavailable = (sqlite3.OperationalError,)

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flux-sqlite")
        self._db: sqlite3.Connection | None = None
        self._commits = GroupCommit(self._write_batch)

    async def _run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def open(self) -> Recovered:
        return await self._run(self._open)

    def _open(self) -> Recovered:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # The database holds worker session tokens: owner-only, like the token files.
        os.chmod(self.path, 0o600)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=5000")
        # Refuse a newer file before touching it: the schema script below may not suit it.
        meta = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
        found = meta and db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if found and int(found["value"]) > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {found['value']}, newer than this Flux ({SCHEMA_VERSION})"
            )
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = {row["name"] for row in db.execute("PRAGMA table_info(workflows)")}
            if columns and "runtime" not in columns:  # version 1: every workflow was Python
                db.execute("ALTER TABLE workflows ADD COLUMN runtime TEXT NOT NULL DEFAULT 'python'")
            if columns and "priority" not in columns:  # before version 3: every priority was 0
                db.execute("ALTER TABLE workflows ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
            if columns and "tenant" not in columns:  # before version 6: every workflow was default's
                db.execute("ALTER TABLE workflows ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'")
            columns = {row["name"] for row in db.execute("PRAGMA table_info(executions)")}
            if columns and "priority" not in columns:
                db.execute("ALTER TABLE executions ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
            if columns and "trace" not in columns:  # before version 4: nothing was traced
                db.execute("ALTER TABLE executions ADD COLUMN trace TEXT NOT NULL DEFAULT ''")
            if columns and "tenant" not in columns:  # before version 5: everything was tenant 'default'
                db.execute("ALTER TABLE executions ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'")
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            db.execute(
                "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                (str(SCHEMA_VERSION),),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._db = db
        recovered = Recovered()
        for row in db.execute("SELECT * FROM workflows ORDER BY name, version"):
            recovered.workflows.append(workflow_from_row(row))
        recovered.unfinished = [
            execution_from_row(row)
            for row in db.execute(f"SELECT * FROM executions WHERE state < {FINISHED} ORDER BY seq")
        ]
        recovered.workers = [
            WorkerIdentity(row["name"], row["session_token"]) for row in db.execute("SELECT * FROM workers")
        ]
        last = db.execute("SELECT MAX(seq) AS seq FROM executions").fetchone()["seq"]
        recovered.next_seq = (last or 0) + 1
        return recovered

    async def close(self) -> None:
        await self._commits.drain()
        if self._db is not None:
            await self._run(self._db.close)
            self._db = None
        self._executor.shutdown(wait=True)

    async def register_workflows(
        self, filename: str, source: str, source_hash: str, workflows: list[WorkflowRecord]
    ) -> list[WorkflowRecord]:
        return await self._run(self._register, filename, source, source_hash, workflows)

    def _register(
        self, filename: str, source: str, source_hash: str, workflows: list[WorkflowRecord]
    ) -> list[WorkflowRecord]:
        assert self._db is not None
        db, now, stored = self._db, time.time(), []
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("INSERT OR IGNORE INTO sources VALUES (?,?,?,?)", (source_hash, filename, source, now))
            for wf in workflows:
                row = db.execute(
                    "SELECT * FROM workflows WHERE name=? ORDER BY version DESC LIMIT 1", (wf.name,)
                ).fetchone()
                latest = workflow_from_row(row) if row else None
                check_owner(latest, wf)
                version = (latest.version if latest else 0) + 1
                record = replace(wf, version=version, source_hash=source_hash, filename=filename)
                if latest is not None and latest.same_definition(record):
                    stored.append(replace(latest, filename=filename, unchanged=True))
                    continue
                db.execute(
                    f"INSERT INTO workflows ({WORKFLOW_COLUMNS}) VALUES ({','.join('?' * WORKFLOW_COLUMN_COUNT)})",
                    workflow_row(record, now),
                )
                record = replace(record, registered_at=now)
                stored.append(record)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return stored

    async def get_source(self, source_hash: str) -> tuple[str, str] | None:
        def read() -> tuple[str, str] | None:
            assert self._db is not None
            row = self._db.execute(
                "SELECT filename, source FROM sources WHERE source_hash=?", (source_hash,)
            ).fetchone()
            return (row["filename"], row["source"]) if row else None

        return await self._run(read)

    def save(self, execution: Execution) -> asyncio.Future[None]:
        return self._commits.save(execution)

    async def _write_batch(self, batch: list[Execution]) -> tuple[str, ...]:
        await self._run(self._write, [execution_row(e) for e in batch])
        return ()  # one writer, no guard: SQLite refuses no row

    def _write(self, rows: list[tuple[object, ...]]) -> None:
        assert self._db is not None
        self._db.execute("BEGIN")
        try:
            self._db.executemany(_UPSERT, rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    async def get_execution(self, execution_id: str) -> Execution | None:
        queued = self._commits.queued(execution_id)
        if queued is not None:
            return queued

        def read() -> Execution | None:
            assert self._db is not None
            row = self._db.execute(
                "SELECT * FROM executions WHERE execution_id=?", (execution_id,)
            ).fetchone()
            return execution_from_row(row) if row else None

        return await self._run(read)

    async def get_input(self, execution_id: str) -> str | None:
        # From the table, never from the queued rows: a queued row may be one whose input the
        # dispatcher no longer holds (and the upsert never overwrites input_json).
        def read() -> str | None:
            assert self._db is not None
            row = self._db.execute(
                "SELECT input_json FROM executions WHERE execution_id=?", (execution_id,)
            ).fetchone()
            return row["input_json"] if row else None

        return await self._run(read)

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        def read() -> list[Execution]:
            assert self._db is not None
            where, params = executions_filter(query, "?")
            sql = f"SELECT * FROM executions {where} ORDER BY seq DESC, execution_id DESC LIMIT ?"
            return [execution_from_row(row) for row in self._db.execute(sql, (*params, query.limit))]

        return await self._run(read)

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        def read() -> list[WorkflowRecord]:
            assert self._db is not None
            return [workflow_from_row(row) for row in self._db.execute(*workflows_query(name, "?"))]

        return await self._run(read)

    async def save_pools(self, pools: list[tuple[str, str]]) -> None:
        def write() -> None:
            assert self._db is not None
            now = time.time()
            self._db.execute("BEGIN IMMEDIATE")  # one transaction: all of the file's pools, or none
            try:
                self._db.executemany(
                    "INSERT INTO pools VALUES (?,?,?) ON CONFLICT (name) DO UPDATE SET "
                    "spec=excluded.spec, updated_at=excluded.updated_at",
                    [(name, spec, now) for name, spec in pools],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

        await self._run(write)

    async def list_pools(self) -> list[tuple[str, str]]:
        def read() -> list[tuple[str, str]]:
            assert self._db is not None
            return [
                (row["name"], row["spec"])
                for row in self._db.execute("SELECT name, spec FROM pools ORDER BY name")
            ]

        return await self._run(read)

    async def save_tenants(self, tenants: list[tuple[str, str]]) -> None:
        def write() -> None:
            assert self._db is not None
            now = time.time()
            self._db.execute("BEGIN IMMEDIATE")  # one transaction: all of the file's tenants, or none
            try:
                self._db.executemany(
                    "INSERT INTO tenants VALUES (?,?,?) ON CONFLICT (name) DO UPDATE SET "
                    "spec=excluded.spec, updated_at=excluded.updated_at",
                    [(name, spec, now) for name, spec in tenants],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

        await self._run(write)

    async def delete_tenant(self, name: str) -> bool:
        def write() -> bool:
            assert self._db is not None
            self._db.execute("BEGIN IMMEDIATE")
            try:
                gone = self._db.execute("DELETE FROM tenants WHERE name = ?", (name,)).rowcount
                self._db.execute("DELETE FROM tokens WHERE tenant = ?", (name,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return gone > 0

        return await self._run(write)

    async def list_tenants(self) -> list[tuple[str, str]]:
        def read() -> list[tuple[str, str]]:
            assert self._db is not None
            return [
                (row["name"], row["spec"])
                for row in self._db.execute("SELECT name, spec FROM tenants ORDER BY name")
            ]

        return await self._run(read)

    async def save_token(self, digest: str, tenant: str, role: str) -> None:
        def write() -> None:
            assert self._db is not None
            self._db.execute("INSERT INTO tokens VALUES (?,?,?,?)", (digest, tenant, role, time.time()))

        await self._run(write)

    async def find_token(self, digest: str) -> tuple[str, str] | None:
        def read() -> tuple[str, str] | None:
            assert self._db is not None
            row = self._db.execute("SELECT tenant, role FROM tokens WHERE digest = ?", (digest,)).fetchone()
            return (row["tenant"], row["role"]) if row else None

        return await self._run(read)

    async def save_worker(self, identity: WorkerIdentity) -> None:
        def write() -> None:
            assert self._db is not None
            self._db.execute(
                "INSERT INTO workers VALUES (?,?,?) ON CONFLICT (name) DO UPDATE SET "
                "session_token=excluded.session_token, updated_at=excluded.updated_at",
                (identity.name, identity.session_token, time.time()),
            )

        await self._run(write)
