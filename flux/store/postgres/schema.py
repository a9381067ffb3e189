"""The PostgreSQL schema: its tables, and the migration every replica runs on open.

Migrations only add (``IF NOT EXISTS``, with column defaults that give older
rows their old meaning), so running them again, or after another replica did,
changes nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg

from flux.store.admin_rows import TOKEN_ADDED
from flux.store.base import StoreError
from flux.store.batch_rows import BATCH_COLUMN, BATCHES_TABLE
from flux.store.limit_rows import LIMITS_TABLE
from flux.store.postgres.cluster import MEMBERSHIP_SCHEMA
from flux.store.rows import CREATED, RUNNING, SCHEDULED
from flux.store.schedule_rows import SCHEDULES_TABLE

# 2: workflows.runtime (added to a version 1 database on open).
# 3: workflows.priority and executions.priority (added on open; older rows get 0).
# 4: executions.trace (added on open; older rows get '', untraced).
# 5: executions.tenant (older rows are tenant 'default'), tenants and tokens.
# 6: workflows.tenant (older workflows are tenant 'default''s, shared by every tenant).
# 7: tokens gain an id, a name, an expiry, last use and revocation (older ones get a random id,
#    no name, no expiry); the audit table.
# 8: tokens.pool (worker tokens bound to one pool; older tokens have none).
# 9: workflows.policy, and executions' policy, not_before, reason, attempts, heartbeat, started_at,
#    run_time (older rows: the default policy with their max_attempts, no wait, no attempts recorded).
# 10: workflows.flow and executions.flow_keys (flow control; older rows limit nothing).
# 11: the limits table (named limits per tenant; created on open, older databases have none).
# 12: flow_buckets, the rate budgets' token buckets shared by the replicas (created on open; a
#     missing row is a full bucket).
# 14: executions.batch_id and the batches table (older rows belong to no batch).
# 17: workflows.placement (a workflow's placement policy; older rows: '', the server's).
# 15: schedules and schedule_runs (created on open; older databases have none).
# 18: executions.after_ids, after_when, waiting (dependencies; older rows wait for nothing).
# 19: workflows.gang and executions.gang (gangs: older rows run on one worker).
SCHEMA_VERSION = 19

# pg_advisory locks are keyed by a bigint; Flux's five are "FLUX" and the four after it:
# this one, cluster.py's SWEEP_LOCK, store.py's WORKFLOWS_LOCK and PRUNE_LOCK, quota.py's QUOTA_LOCK.
MIGRATION_LOCK = 0x464C5558  # schema creation and migration, on open

TOKEN_MIGRATION = "\n".join(
    f"ALTER TABLE tokens ADD COLUMN IF NOT EXISTS {column} {definition};"
    for column, definition in TOKEN_ADDED
)

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
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS policy TEXT NOT NULL DEFAULT '';
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS flow TEXT NOT NULL DEFAULT '';
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS placement TEXT NOT NULL DEFAULT '';
ALTER TABLE workflows ADD COLUMN IF NOT EXISTS gang TEXT NOT NULL DEFAULT '';
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
ALTER TABLE executions ADD COLUMN IF NOT EXISTS policy TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS not_before DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS reason TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS attempts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS heartbeat TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS started_at DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS run_time DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS flow_keys TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS {BATCH_COLUMN[0]} {BATCH_COLUMN[1]};
{BATCHES_TABLE.format(real="DOUBLE PRECISION")}
ALTER TABLE executions ADD COLUMN IF NOT EXISTS after_ids TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS after_when TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN IF NOT EXISTS waiting INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN IF NOT EXISTS gang TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS tenants (name TEXT PRIMARY KEY, spec TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL);
{LIMITS_TABLE.format(real="DOUBLE PRECISION")}
{SCHEDULES_TABLE.format(real="DOUBLE PRECISION")};
CREATE TABLE IF NOT EXISTS tokens (
    digest TEXT PRIMARY KEY, tenant TEXT NOT NULL, role TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL);
{TOKEN_MIGRATION}
UPDATE tokens SET id = substr(md5(random()::text || digest), 1, 12) WHERE id = '';
CREATE UNIQUE INDEX IF NOT EXISTS tokens_by_id ON tokens (id);
CREATE TABLE IF NOT EXISTS audit (
    seq BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL, token_id TEXT NOT NULL,
    caller_tenant TEXT NOT NULL, caller_role TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL,
    tenant TEXT NOT NULL, details_json TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_at ON audit (at);
CREATE INDEX IF NOT EXISTS executions_pending ON executions (seq) WHERE state = {CREATED};
CREATE INDEX IF NOT EXISTS executions_held ON executions (worker) WHERE state IN ({SCHEDULED}, {RUNNING});
CREATE INDEX IF NOT EXISTS executions_owned ON executions (owner) WHERE state IN ({SCHEDULED}, {RUNNING});
CREATE INDEX IF NOT EXISTS executions_recent ON executions (seq);
CREATE INDEX IF NOT EXISTS executions_by_workflow ON executions (workflow_name, seq);
CREATE TABLE IF NOT EXISTS dispatches (
    execution_id TEXT NOT NULL, generation BIGINT NOT NULL, worker TEXT NOT NULL, replica TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL, PRIMARY KEY (execution_id, generation));
CREATE INDEX IF NOT EXISTS dispatches_at ON dispatches (at);
CREATE TABLE IF NOT EXISTS flow_buckets (
    budget TEXT PRIMARY KEY, tenant TEXT NOT NULL, tokens DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL);
-- When the bucket is full again (pruned from then on); a row written before it knew is never
-- pruned. Added on open without a new schema version: a Flux that does not know the column
-- writes rows without it, which only keeps them.
ALTER TABLE flow_buckets ADD COLUMN IF NOT EXISTS full_at DOUBLE PRECISION NOT NULL DEFAULT 'Infinity';
CREATE INDEX IF NOT EXISTS flow_buckets_full ON flow_buckets (full_at);
CREATE TABLE IF NOT EXISTS preemptions (
    preemptor TEXT PRIMARY KEY, replica TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
"""


async def migrate(db: psycopg.AsyncConnection[Any]) -> None:
    """Create or migrate the schema, inside the caller's transaction; refuse a newer database."""
    # Replicas starting together would otherwise race to create the same tables.
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
