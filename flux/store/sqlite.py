"""SQLite store: the embedded default, one file under ``./.flux/`` in WAL mode.

Two connections. Reads run on one dedicated thread with a read-only connection, so the event
loop never waits for a listing; WAL lets them read while a write commits. Writes go through
the other connection, one at a time (a lock). A small batch of execution rows, the common case
of one run after another, is committed on the event loop itself: with ``synchronous=NORMAL``
such a commit is an append to the WAL file without an fsync, tens of microseconds, while
handing it to a thread and back cost two wake-ups, about a tenth of a sequential run's time.
Larger batches and every other write run on the thread. The WAL is checkpointed on a third
thread with a connection of its own (``wal_autocheckpoint`` is off on the writer), since a
checkpoint fsyncs and would otherwise fall on whichever commit crossed the threshold, on the
loop, or hold up the writes and reads queued on the store's thread (sqlite_checkpoint.py).

``synchronous=NORMAL`` in WAL mode survives any process crash (a committed transaction is in
the WAL file before the call returns); only a power loss can drop the last commits, which is
the usual trade for an embedded default.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from flux.domain.execution import Execution
from flux.domain.workflow import WorkflowRecord
from flux.store import limit_rows
from flux.store.admin_rows import (
    AUDIT_COLUMNS,
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
from flux.store.base import AuditRecord, ExecutionQuery, Recovered, Store, TokenRecord, WorkerIdentity
from flux.store.group_commit import GroupCommit
from flux.store.rows import (
    EXECUTION_COLUMNS,
    EXECUTION_UPDATES,
    FAILED,
    FINISHED,
    execution_from_row,
    execution_row,
    executions_filter,
    workflow_from_row,
    workflows_query,
)
from flux.store.sqlite_batches import SqliteBatches
from flux.store.sqlite_bulk import upsert_executions
from flux.store.sqlite_checkpoint import Checkpointer
from flux.store.sqlite_schedules import SqliteSchedules
from flux.store.sqlite_schema import list_specs, migrate, register, save_specs, transaction, upsert

T = TypeVar("T")

log = logging.getLogger("flux.store")

# A batch of at most this many rows commits on the event loop; a larger one (a burst, a bulk
# submission, a recovery) on the thread, so the loop never waits for a long write. One row is the
# sequential case the inline commit is for. At 32, a burst of one-by-one submissions (64 in
# flight) committed nearly every small batch on the loop: the loop did the writes the thread did
# beside it before, and batches stayed small; the server's CPU per execution went from 0.75-0.85
# to 1.15-1.35 ms and the burst from 1,100-1,300/s to 640-990/s (issue 46, bisected to the commit
# that brought the inline write). At 1, a burst's batches grow on the thread again.
INLINE_ROWS = 1
# Commits between checkpoints: about what SQLite's own 1,000-page default comes to at a few
# pages per commit.
CHECKPOINT_EVERY = 256


class SqliteStore(SqliteBatches, SqliteSchedules, Store):
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
        self._checkpointer = Checkpointer(self.path)
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
        migrate(db, self.path)
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
        await self._checkpointer.close()
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
        return await self._change(lambda db: register(db, filename, source, source_hash, workflows))

    async def get_source(self, source_hash: str) -> tuple[str, str] | None:
        def read(db: sqlite3.Connection) -> tuple[str, str] | None:
            row = db.execute(
                "SELECT filename, source FROM sources WHERE source_hash=?", (source_hash,)
            ).fetchone()
            return (row["filename"], row["source"]) if row else None

        return await self._read(read)

    def save(self, execution: Execution) -> asyncio.Future[None]:
        return self._commits.save(execution)

    def save_many(self, executions: list[Execution]) -> asyncio.Future[None]:
        return self._commits.save_many(executions)

    async def reopen(self, execution: Execution) -> bool:
        row = execution_row(execution)
        columns = [c.strip() for c in EXECUTION_COLUMNS.split(",")]
        updates = [c.strip() for c in EXECUTION_UPDATES.split(",")]
        values = [row[columns.index(c)] for c in updates]

        def write(db: sqlite3.Connection) -> bool:
            with transaction(db):
                cursor = db.execute(
                    f"UPDATE executions SET {', '.join(f'{c}=?' for c in updates)} "
                    f"WHERE execution_id=? AND state={FAILED}",
                    (*values, execution.execution_id),
                )
                return cursor.rowcount == 1

        return await self._change(write)

    async def _write_batch(self, batch: list[Execution]) -> tuple[str, ...]:
        # Inline only when no write on the thread holds the writer: the loop never waits for one.
        if len(batch) <= INLINE_ROWS and self._writing.acquire(blocking=False):
            try:
                assert self._db is not None
                upsert(self._db, [execution_row(e) for e in batch])
            finally:
                self._writing.release()
        else:
            # On the thread, rows and all (sqlite_bulk.py: a bulk call's members as one statement).
            await self._change(lambda db: upsert_executions(db, batch))
        self._commit_landed()
        return ()  # one writer, no guard: SQLite refuses no row

    def _commit_landed(self) -> None:
        """Checkpoint the WAL on its own thread every CHECKPOINT_EVERY commits, one at a time."""
        self._uncheckpointed += 1
        if self._uncheckpointed < CHECKPOINT_EVERY or self._checkpoint is not None:
            return
        self._uncheckpointed = 0
        # PASSIVE: copies what no reader still needs into the database file; never waits for
        # (nor blocks) a writer, so a commit on the loop goes on meanwhile.
        self._checkpoint = checkpoint = asyncio.ensure_future(self._checkpointer.checkpoint())

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

    async def get_executions(self, execution_ids: list[str]) -> dict[str, Execution]:
        found = {i: e for i in execution_ids if (e := self._commits.queued(i)) is not None}
        rest = [i for i in execution_ids if i not in found]

        def read(db: sqlite3.Connection) -> dict[str, Execution]:
            rows: dict[str, Execution] = {}
            for start in range(0, len(rest), 500):  # within SQLite's variable limit
                part = rest[start : start + 500]
                query = f"SELECT * FROM executions WHERE execution_id IN ({','.join('?' * len(part))})"
                rows.update((row["execution_id"], execution_from_row(row)) for row in db.execute(query, part))
            return rows

        return found | (await self._read(read) if rest else {})

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
        await self._change(lambda db: save_specs(db, "pools", pools))

    async def list_pools(self) -> list[tuple[str, str]]:
        return await self._read(lambda db: list_specs(db, "pools"))

    async def save_tenants(self, tenants: list[tuple[str, str]]) -> None:
        await self._change(lambda db: save_specs(db, "tenants", tenants))

    async def delete_tenant(self, name: str, tombstone: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            with transaction(db):
                gone = db.execute("DELETE FROM tenants WHERE name = ?", (name,)).rowcount
                db.execute("DELETE FROM tokens WHERE tenant = ?", (name,))
                db.execute("UPDATE executions SET tenant = ? WHERE tenant = ?", (tombstone, name))
                db.execute("UPDATE workflows SET tenant = ? WHERE tenant = ?", (tombstone, name))
            return gone > 0

        return await self._change(write)

    async def list_tenants(self) -> list[tuple[str, str]]:
        return await self._read(lambda db: list_specs(db, "tenants"))

    async def save_limits(self, limits: list[tuple[str, str, str]]) -> None:
        now = time.time()

        def write(db: sqlite3.Connection) -> None:
            with transaction(db):
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
            with transaction(db):
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
            with transaction(db):
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
