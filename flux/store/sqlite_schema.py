"""The SQLite file's tables: the schema, its version and the migration of older files, and the
statements the store runs inside one transaction (upserts, registrations, pool and tenant specs).
Its own module so that sqlite.py holds the store's threading and commit story alone, and the
schema's history reads in one place."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from flux.domain.workflow import WorkflowRecord
from flux.store.admin_rows import TOKEN_ADDED
from flux.store.base import StoreError
from flux.store.batch_rows import BATCH_COLUMN, BATCHES_TABLE
from flux.store.limit_rows import LIMITS_TABLE
from flux.store.rows import (
    EXECUTION_COLUMNS,
    EXECUTION_UPDATES,
    FINISHED,
    WORKFLOW_COLUMN_COUNT,
    WORKFLOW_COLUMNS,
    next_version,
    workflow_from_row,
    workflow_row,
)
from flux.store.schedule_rows import SCHEDULES_TABLE

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
# 13: executions.batch_id and the batches table (older rows belong to no batch).
# 16: workflows.placement (a workflow's placement policy; older rows: '', the server's).
# 14: schedules and schedule_runs (created on open, older files have none).
# 17: executions.after_ids, after_when, waiting (dependencies; older rows wait for nothing).
# 18: workflows.gang and executions.gang (gangs: older rows run on one worker).
SCHEMA_VERSION = 18


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
    BATCH_COLUMN,  # version 13
    ("after_ids", "TEXT NOT NULL DEFAULT ''"),  # version 17: dependency ids, space-separated
    ("after_when", "TEXT NOT NULL DEFAULT ''"),
    ("waiting", "INTEGER NOT NULL DEFAULT 0"),
    ("gang", "TEXT NOT NULL DEFAULT ''"),  # version 18
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
    placement TEXT NOT NULL DEFAULT '', gang TEXT NOT NULL DEFAULT '',
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
{BATCHES_TABLE.format(real="REAL")}
{SCHEDULES_TABLE.format(real="REAL")};
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


@contextlib.contextmanager
def transaction(db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    db.execute(begin)
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def upsert(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    with transaction(db, "BEGIN"):
        db.executemany(_UPSERT, rows)


def register(
    db: sqlite3.Connection, filename: str, source: str, source_hash: str, workflows: list[WorkflowRecord]
) -> list[WorkflowRecord]:
    now, stored = time.time(), []
    with transaction(db):
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


def save_specs(db: sqlite3.Connection, table: str, specs: list[tuple[str, str]]) -> None:
    """Pools or tenants (``table``), all of the file's in one transaction, or none."""
    now = time.time()
    with transaction(db):
        db.executemany(
            f"INSERT INTO {table} VALUES (?,?,?) ON CONFLICT (name) DO UPDATE SET "
            "spec=excluded.spec, updated_at=excluded.updated_at",
            [(name, spec, now) for name, spec in specs],
        )


def list_specs(db: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    return [(row["name"], row["spec"]) for row in db.execute(f"SELECT name, spec FROM {table} ORDER BY name")]


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring the file to SCHEMA_VERSION: older files gain their missing columns, a newer one is refused."""
    # Refuse a newer file before touching it: the schema script below may not suit it.
    meta = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
    found = meta and db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if found and int(found["value"]) > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has schema version {found['value']}, newer than this Flux ({SCHEMA_VERSION})"
        )
    with transaction(db):
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
        if columns and "placement" not in columns:  # before version 16: the server's policy for all
            db.execute("ALTER TABLE workflows ADD COLUMN placement TEXT NOT NULL DEFAULT ''")
        if columns and "gang" not in columns:  # before version 18: every execution had one worker
            db.execute("ALTER TABLE workflows ADD COLUMN gang TEXT NOT NULL DEFAULT ''")
        columns = {row["name"] for row in db.execute("PRAGMA table_info(executions)")}
        if columns and "priority" not in columns:
            db.execute("ALTER TABLE executions ADD COLUMN priority INTEGER NOT NULL DEFAULT 0")
        if columns and "trace" not in columns:  # before version 4: nothing was traced
            db.execute("ALTER TABLE executions ADD COLUMN trace TEXT NOT NULL DEFAULT ''")
        if columns and "tenant" not in columns:  # before version 5: everything was tenant 'default'
            db.execute("ALTER TABLE executions ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'")
        for (
            name,
            kind,
        ) in _EXECUTION_TIMING_COLUMNS:  # before version 9 (10: flow_keys, 13: batch_id, 17: dependencies)
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
