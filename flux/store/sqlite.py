"""SQLite store: the embedded default, one file under ``./.flux/`` in WAL mode.

Two connections. Reads run on one dedicated thread with a read-only connection, so the event
loop never waits for a listing; WAL lets them read while a write commits. Writes go through
the other connection, one at a time (a lock). A small batch of execution rows, the common case
of one run after another, is committed on the event loop itself: with ``synchronous=NORMAL``
such a commit is an append to the WAL file without an fsync, tens of microseconds, while
handing it to a thread and back cost two wake-ups, about a tenth of a sequential run's time.
Larger batches and every other write run on the thread. The WAL is checkpointed on the thread
too (``wal_autocheckpoint`` is off on the writer), since a checkpoint fsyncs and would
otherwise fall on whichever commit crossed the threshold, on the loop.

``synchronous=NORMAL`` in WAL mode survives any process crash (a committed transaction is in
the WAL file before the call returns); only a power loss can drop the last commits, which is
the usual trade for an embedded default.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from flux.domain.execution import Execution
from flux.domain.workflow import WorkflowRecord
from flux.store import limit_rows
from flux.store.admin_rows import (
    AUDIT_COLUMNS,
    TOKEN_ADDED,
    TOKEN_COLUMN_COUNT,
    TOKEN_COLUMNS,
    audit_from_row,
    audit_prune,
    audit_query,
    audit_row,
    token_from_row,
    token_row,
    tokens_query,
)
from flux.store.base import (
    AuditRecord,
    ExecutionQuery,
    Recovered,
    Store,
    StoreError,
    TokenRecord,
    WorkerIdentity,
)
from flux.store.group_commit import GroupCommit
from flux.store.limit_rows import LIMITS_TABLE
from flux.store.rows import (
    EXECUTION_COLUMNS,
    EXECUTION_UPDATES,
    FAILED,
    FINISHED,
    WORKFLOW_COLUMN_COUNT,
    WORKFLOW_COLUMNS,
    execution_from_row,
    execution_row,
    executions_filter,
    next_version,
    workflow_from_row,
    workflow_row,
    workflows_query,
)

# 2: workflows.runtime (a version 1 file is migrated on open).
# 3: workflows.priority and executions.priority (older files are migrated on open; rows get 0).
# 4: executions.trace (migrated on open; older rows get '', untraced).
# 5: executions.tenant (older rows are tenant 'default'), tenants and tokens.
# 6: workflows.tenant (older workflows are tenant 'default''s, shared by every tenant).
# 7: tokens gain an id, a name, an expiry, last use and revocation (older ones get a random id,
#    no name, no expiry); the audit table.
# 8: tokens.pool (worker tokens bound to one pool; older tokens have none).
# 9: workflows.policy, and executions' policy, not_before, reason, attempts, heartbeat, started_at,
#    run_time (older rows: the default policy with their max_attempts, no wait, no attempts recorded).
# 10: workflows.flow and executions.flow_keys (flow control; older rows limit nothing).
# 11: the limits table (named limits per tenant; created on open, older files have none).
SCHEMA_VERSION = 11

T = TypeVar("T")

log = logging.getLogger("flux.store")

# A batch of at most this many rows commits on the event loop; a larger one (a bulk submission,
# a recovery) on the thread, so the loop never waits for a long write.
INLINE_ROWS = 32
# Commits between checkpoints: about what SQLite's own 1,000-page default comes to at a few
# pages per commit.
CHECKPOINT_EVERY = 256

# Version 7's execution columns, in the table's definition and added to older files on open.
_EXECUTION_TIMING_COLUMNS = (
    ("policy", "TEXT NOT NULL DEFAULT ''"),
    ("not_before", "REAL NOT NULL DEFAULT 0"),
    ("reason", "TEXT NOT NULL DEFAULT ''"),
    ("attempts", "TEXT NOT NULL DEFAULT '[]'"),
    ("heartbeat", "TEXT NOT NULL DEFAULT ''"),
    ("started_at", "REAL NOT NULL DEFAULT 0"),
    ("run_time", "REAL NOT NULL DEFAULT 0"),
    ("flow_keys", "TEXT NOT NULL DEFAULT ''"),  # version 10
)
_EXECUTION_TIMING = ", ".join(f"{name} {kind}" for name, kind in _EXECUTION_TIMING_COLUMNS)

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    source_hash TEXT PRIMARY KEY, filename TEXT NOT NULL, source TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS workflows (
    name TEXT NOT NULL, version INTEGER NOT NULL, source_hash TEXT NOT NULL, entrypoint TEXT NOT NULL,
    requests TEXT NOT NULL, affinity TEXT NOT NULL, max_attempts INTEGER NOT NULL, created_at REAL NOT NULL,
    runtime TEXT NOT NULL DEFAULT 'python', priority INTEGER NOT NULL DEFAULT 0,
    tenant TEXT NOT NULL DEFAULT 'default', policy TEXT NOT NULL DEFAULT '', flow TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS executions (
    execution_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, workflow_name TEXT NOT NULL,
    workflow_version INTEGER NOT NULL, source_hash TEXT NOT NULL, entrypoint TEXT NOT NULL,
    state INTEGER NOT NULL, worker TEXT NOT NULL, attempt INTEGER NOT NULL, generation INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL, input_json TEXT NOT NULL, output_json TEXT NOT NULL, error TEXT,
    gpu_indices TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0, trace TEXT NOT NULL DEFAULT '', tenant TEXT NOT NULL DEFAULT 'default',
    {_EXECUTION_TIMING});
CREATE INDEX IF NOT EXISTS executions_unfinished ON executions (state) WHERE state < {FINISHED};
CREATE INDEX IF NOT EXISTS executions_recent ON executions (seq);
CREATE INDEX IF NOT EXISTS executions_by_workflow ON executions (workflow_name, seq);
CREATE TABLE IF NOT EXISTS workers (name TEXT PRIMARY KEY, session_token TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS pools (name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_at REAL NOT NULL);
{LIMITS_TABLE.format(real="REAL")}
CREATE TABLE IF NOT EXISTS tokens (
    digest TEXT PRIMARY KEY, tenant TEXT NOT NULL, role TEXT NOT NULL, created_at REAL NOT NULL,
    id TEXT NOT NULL DEFAULT '', name TEXT NOT NULL DEFAULT '', expires_at REAL, last_used_at REAL,
    revoked INTEGER NOT NULL DEFAULT 0, pool TEXT NOT NULL DEFAULT '');
UPDATE tokens SET id = lower(hex(randomblob(6))) WHERE id = '';
CREATE UNIQUE INDEX IF NOT EXISTS tokens_by_id ON tokens (id);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, token_id TEXT NOT NULL,
    caller_tenant TEXT NOT NULL, caller_role TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL,
    tenant TEXT NOT NULL, details_json TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_at ON audit (at);
"""

_UPSERT = f"""
INSERT INTO executions ({EXECUTION_COLUMNS}) VALUES ({",".join(["?"] * (EXECUTION_COLUMNS.count(",") + 1))})
ON CONFLICT (execution_id) DO UPDATE SET
    {", ".join(f"{c.strip()}=excluded.{c.strip()}" for c in EXECUTION_UPDATES.split(","))}
"""


class SqliteStore(Store):
    # "database is locked" past the busy timeout, a disk I/O error, a file that went away.
    unavailable = (sqlite3.OperationalError,)

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flux-sqlite")
        self._db: sqlite3.Connection | None = None  # the writer: loop and thread, under _writing
        self._reader: sqlite3.Connection | None = None  # the thread's only
        self._writing = threading.Lock()
        self._commits = GroupCommit(self._write_batch)
        self._uncheckpointed = 0
        self._checkpoint: asyncio.Future[object] | None = None

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on the thread, with the read-only connection."""

        def read() -> T:
            assert self._reader is not None
            return fn(self._reader)

        return await self._run(read)

    async def _change(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on the thread, with the writer, once no other write holds it."""

        def change() -> T:
            assert self._db is not None
            with self._writing:
                return fn(self._db)

        return await self._run(change)

    async def open(self) -> Recovered:
        return await self._run(self._open)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA busy_timeout=5000")
        return db

    def _open(self) -> Recovered:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        db = self._connect()
        # The database holds worker session tokens: owner-only, like the token files.
        os.chmod(self.path, 0o600)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run on the thread (_commit_landed)
        # Refuse a newer file before touching it: the schema script below may not suit it.
        meta = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
        found = meta and db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if found and int(found["value"]) > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {found['value']}, newer than this Flux ({SCHEMA_VERSION})"
            )
        with _transaction(db):
            columns = {row["name"] for row in db.execute("PRAGMA table_info(workflows)")}
            if columns and "runtime" not in columns:  # version 1: every workflow was Python
                db.execute("ALTER TABLE workflows ADD COLUMN runtime TEXT NOT NULL DEFAULT 'python'")
            if columns and "priority" not in columns:  # before version 3: every priority was 0
                db.execute("ALTER TABLE workflows ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
            if columns and "tenant" not in columns:  # before version 6: every workflow was default's
                db.execute("ALTER TABLE workflows ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'")
            if columns and "policy" not in columns:  # before version 9: policies were max_attempts alone
                db.execute("ALTER TABLE workflows ADD COLUMN policy TEXT NOT NULL DEFAULT ''")
            if columns and "flow" not in columns:  # before version 10: nothing was flow-limited
                db.execute("ALTER TABLE workflows ADD COLUMN flow TEXT NOT NULL DEFAULT ''")
            columns = {row["name"] for row in db.execute("PRAGMA table_info(executions)")}
            if columns and "priority" not in columns:
                db.execute("ALTER TABLE executions ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
            if columns and "trace" not in columns:  # before version 4: nothing was traced
                db.execute("ALTER TABLE executions ADD COLUMN trace TEXT NOT NULL DEFAULT ''")
            if columns and "tenant" not in columns:  # before version 5: everything was tenant 'default'
                db.execute("ALTER TABLE executions ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'")
            for name, kind in _EXECUTION_TIMING_COLUMNS:  # before version 9 (10: flow_keys)
                if columns and name not in columns:
                    db.execute(f"ALTER TABLE executions ADD COLUMN {name} {kind}")
            columns = {row["name"] for row in db.execute("PRAGMA table_info(tokens)")}
            for column, definition in TOKEN_ADDED if columns else ():  # before version 7 (8: pool)
                if column not in columns:
                    db.execute(f"ALTER TABLE tokens ADD COLUMN {column} {definition}")
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            db.execute(
                "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                (str(SCHEMA_VERSION),),
            )
        self._db = db
        self._reader = self._connect()
        self._reader.execute("PRAGMA query_only=1")
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
        if self._checkpoint is not None:
            await asyncio.shield(self._checkpoint)
        if self._db is not None:

            def close() -> None:
                assert self._db is not None and self._reader is not None
                self._reader.close()
                self._db.close()  # the last connection: checkpoints what is left of the WAL

            await self._run(close)
            self._db = self._reader = None
        self._executor.shutdown(wait=True)

    async def register_workflows(
        self, filename: str, source: str, source_hash: str, workflows: list[WorkflowRecord]
    ) -> list[WorkflowRecord]:
        return await self._change(lambda db: _register(db, filename, source, source_hash, workflows))

    async def get_source(self, source_hash: str) -> tuple[str, str] | None:
        def read(db: sqlite3.Connection) -> tuple[str, str] | None:
            row = db.execute(
                "SELECT filename, source FROM sources WHERE source_hash=?", (source_hash,)
            ).fetchone()
            return (row["filename"], row["source"]) if row else None

        return await self._read(read)

    def save(self, execution: Execution) -> asyncio.Future[None]:
        return self._commits.save(execution)

    async def reopen(self, execution: Execution) -> bool:
        row = execution_row(execution)
        columns = [c.strip() for c in EXECUTION_COLUMNS.split(",")]
        updates = [c.strip() for c in EXECUTION_UPDATES.split(",")]
        values = [row[columns.index(c)] for c in updates]

        def write(db: sqlite3.Connection) -> bool:
            with _transaction(db):
                cursor = db.execute(
                    f"UPDATE executions SET {', '.join(f'{c}=?' for c in updates)} "
                    f"WHERE execution_id=? AND state={FAILED}",
                    (*values, execution.execution_id),
                )
                return cursor.rowcount == 1

        return await self._change(write)

    async def _write_batch(self, batch: list[Execution]) -> tuple[str, ...]:
        rows = [execution_row(e) for e in batch]
        # Inline only when no write on the thread holds the writer: the loop never waits for one.
        if len(rows) <= INLINE_ROWS and self._writing.acquire(blocking=False):
            try:
                assert self._db is not None
                _upsert(self._db, rows)
            finally:
                self._writing.release()
        else:
            await self._change(lambda db: _upsert(db, rows))
        self._commit_landed()
        return ()  # one writer, no guard: SQLite refuses no row

    def _commit_landed(self) -> None:
        """Checkpoint the WAL on the thread every CHECKPOINT_EVERY commits, one at a time."""
        self._uncheckpointed += 1
        if self._uncheckpointed < CHECKPOINT_EVERY or self._checkpoint is not None:
            return
        self._uncheckpointed = 0
        # PASSIVE: copies what no reader still needs into the database file; never waits for
        # (nor blocks) a writer, so a commit on the loop goes on meanwhile.
        self._checkpoint = checkpoint = asyncio.ensure_future(
            self._read(lambda db: db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone())
        )

        def done(future: asyncio.Future[object]) -> None:
            self._checkpoint = None
            if not future.cancelled() and future.exception() is not None:  # the next one tries again
                log.warning("checkpointing %s failed: %s", self.path, future.exception())

        checkpoint.add_done_callback(done)

    async def get_execution(self, execution_id: str) -> Execution | None:
        queued = self._commits.queued(execution_id)
        if queued is not None:
            return queued

        def read(db: sqlite3.Connection) -> Execution | None:
            row = db.execute("SELECT * FROM executions WHERE execution_id=?", (execution_id,)).fetchone()
            return execution_from_row(row) if row else None

        return await self._read(read)

    async def get_input(self, execution_id: str) -> str | None:
        # From the table, never from the queued rows: a queued row may be one whose input the
        # dispatcher no longer holds (and the upsert never overwrites input_json).
        def read(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT input_json FROM executions WHERE execution_id=?", (execution_id,)
            ).fetchone()
            return row["input_json"] if row else None

        return await self._read(read)

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        def read(db: sqlite3.Connection) -> list[Execution]:
            where, params = executions_filter(query, "?")
            sql = f"SELECT * FROM executions {where} ORDER BY seq DESC, execution_id DESC LIMIT ?"
            return [execution_from_row(row) for row in db.execute(sql, (*params, query.limit))]

        return await self._read(read)

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        return await self._read(
            lambda db: [workflow_from_row(row) for row in db.execute(*workflows_query(name, "?"))]
        )

    async def save_pools(self, pools: list[tuple[str, str]]) -> None:
        await self._change(lambda db: _save_specs(db, "pools", pools))

    async def list_pools(self) -> list[tuple[str, str]]:
        return await self._read(lambda db: _list_specs(db, "pools"))

    async def save_tenants(self, tenants: list[tuple[str, str]]) -> None:
        await self._change(lambda db: _save_specs(db, "tenants", tenants))

    async def delete_tenant(self, name: str, tombstone: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            with _transaction(db):
                gone = db.execute("DELETE FROM tenants WHERE name = ?", (name,)).rowcount
                db.execute("DELETE FROM tokens WHERE tenant = ?", (name,))
                db.execute("UPDATE executions SET tenant = ? WHERE tenant = ?", (tombstone, name))
                db.execute("UPDATE workflows SET tenant = ? WHERE tenant = ?", (tombstone, name))
            return gone > 0

        return await self._change(write)

    async def list_tenants(self) -> list[tuple[str, str]]:
        return await self._read(lambda db: _list_specs(db, "tenants"))

    async def save_limits(self, limits: list[tuple[str, str, str]]) -> None:
        now = time.time()

        def write(db: sqlite3.Connection) -> None:
            with _transaction(db):
                db.executemany(limit_rows.save_sql("?"), [(t, n, spec, now) for t, n, spec in limits])

        await self._change(write)

    async def delete_limit(self, tenant: str, name: str) -> bool:
        return await self._change(
            lambda db: db.execute(limit_rows.delete_sql("?"), (tenant, name)).rowcount > 0
        )

    async def list_limits(self, tenant: str = "") -> list[tuple[str, str, str]]:
        sql, params = limit_rows.list_sql(tenant, "?")
        return await self._read(lambda db: [(r[0], r[1], r[2]) for r in db.execute(sql, params)])

    async def save_token(self, token: TokenRecord) -> None:
        await self._change(
            lambda db: db.execute(
                f"INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ({','.join('?' * TOKEN_COLUMN_COUNT)})",
                token_row(token),
            )
        )

    async def find_token(self, digest: str) -> TokenRecord | None:
        def read(db: sqlite3.Connection) -> TokenRecord | None:
            row = db.execute(f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE digest = ?", (digest,)).fetchone()
            return token_from_row(tuple(row)) if row else None

        return await self._read(read)

    async def list_tokens(self, tenant: str = "") -> list[TokenRecord]:
        return await self._read(
            lambda db: [token_from_row(tuple(row)) for row in db.execute(*tokens_query(tenant, "?"))]
        )

    async def revoke_token(self, token_id: str, tenant: str = "") -> TokenRecord | None:
        def write(db: sqlite3.Connection) -> TokenRecord | None:
            with _transaction(db):
                row = db.execute(
                    f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ? AND revoked = 0", (token_id,)
                ).fetchone()
                if row is None or (tenant and row["tenant"] != tenant):
                    return None
                db.execute("UPDATE tokens SET revoked = 1 WHERE id = ?", (token_id,))
            return token_from_row(tuple(row))

        return await self._change(write)

    async def touch_token(self, token_id: str, at: float) -> None:
        await self._change(
            lambda db: db.execute("UPDATE tokens SET last_used_at = ? WHERE id = ?", (at, token_id))
        )

    async def save_audit(self, entry: AuditRecord) -> None:
        def write(db: sqlite3.Connection) -> None:
            with _transaction(db):
                db.execute(
                    f"INSERT INTO audit ({AUDIT_COLUMNS}) VALUES ({','.join('?' * 8)})", audit_row(entry)
                )
                db.execute(*audit_prune("?"))

        await self._change(write)

    async def list_audit(self, since: float = 0.0, tenant: str = "", limit: int = 1000) -> list[AuditRecord]:
        return await self._read(
            lambda db: [
                audit_from_row(tuple(row)) for row in db.execute(*audit_query(since, tenant, limit, "?"))
            ]
        )

    async def save_worker(self, identity: WorkerIdentity) -> None:
        await self._change(
            lambda db: db.execute(
                "INSERT INTO workers VALUES (?,?,?) ON CONFLICT (name) DO UPDATE SET "
                "session_token=excluded.session_token, updated_at=excluded.updated_at",
                (identity.name, identity.session_token, time.time()),
            )
        )


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    db.execute(begin)
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _upsert(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    with _transaction(db, "BEGIN"):
        db.executemany(_UPSERT, rows)


def _register(
    db: sqlite3.Connection, filename: str, source: str, source_hash: str, workflows: list[WorkflowRecord]
) -> list[WorkflowRecord]:
    now, stored = time.time(), []
    with _transaction(db):
        db.execute("INSERT OR IGNORE INTO sources VALUES (?,?,?,?)", (source_hash, filename, source, now))
        for wf in workflows:
            row = db.execute(
                "SELECT * FROM workflows WHERE name=? ORDER BY version DESC LIMIT 1", (wf.name,)
            ).fetchone()
            record = next_version(workflow_from_row(row) if row else None, wf, source_hash, filename)
            if record.unchanged:
                stored.append(record)
                continue
            db.execute(
                f"INSERT INTO workflows ({WORKFLOW_COLUMNS}) VALUES ({','.join('?' * WORKFLOW_COLUMN_COUNT)})",
                workflow_row(record, now),
            )
            stored.append(replace(record, registered_at=now))
    return stored


def _save_specs(db: sqlite3.Connection, table: str, specs: list[tuple[str, str]]) -> None:
    """Pools or tenants (``table``), all of the file's in one transaction, or none."""
    now = time.time()
    with _transaction(db):
        db.executemany(
            f"INSERT INTO {table} VALUES (?,?,?) ON CONFLICT (name) DO UPDATE SET "
            "spec=excluded.spec, updated_at=excluded.updated_at",
            [(name, spec, now) for name, spec in specs],
        )


def _list_specs(db: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    return [(row["name"], row["spec"]) for row in db.execute(f"SELECT name, spec FROM {table} ORDER BY name")]
