"""Batches as both stores keep them: one row per batch, its members' rows naming it.

The SQL is shared by SQLite and PostgreSQL (``p`` is the placeholder, ``?`` or ``%s``), so the
two stores cannot drift. A batch's progress is counted from its members' rows (an index on
``(batch_id, state)`` of the rows that have one), never kept as a count that could drift.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flux.domain.batch import Batch
from flux.domain.execution import State
from flux.store.rows import FINISHED

BATCHES_TABLE = (
    "CREATE TABLE IF NOT EXISTS batches (batch_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, "
    "workflow_name TEXT NOT NULL, max_concurrent INTEGER NOT NULL, created_at {real} NOT NULL, "
    "cancelled_at {real} NOT NULL DEFAULT 0);\n"
    "CREATE INDEX IF NOT EXISTS executions_by_batch ON executions (batch_id, state) WHERE batch_id <> '';"
)
# The executions column, added to older files and databases on open.
BATCH_COLUMN = ("batch_id", "TEXT NOT NULL DEFAULT ''")

_COLUMNS = "batch_id, tenant, workflow_name, max_concurrent, created_at, cancelled_at"


def save_sql(p: str) -> str:
    return f"INSERT INTO batches ({_COLUMNS}) VALUES ({p},{p},{p},{p},{p},{p})"


def batch_row(batch: Batch) -> tuple[object, ...]:
    return (
        batch.batch_id, batch.tenant, batch.workflow_name, batch.max_concurrent, batch.created_at,
        batch.cancelled_at,
    )  # fmt: skip


def get_sql(p: str) -> str:
    return f"SELECT {_COLUMNS} FROM batches WHERE batch_id = {p}"


def batch_from_row(row: Iterable[Any]) -> Batch:
    batch_id, tenant, workflow, most, created_at, cancelled_at = row
    return Batch(batch_id, tenant, workflow, int(most), float(created_at), float(cancelled_at))


def counts_sql(p: str) -> str:
    return f"SELECT state, count(*) FROM executions WHERE batch_id = {p} GROUP BY state"


def counts_from_rows(rows: Iterable[Any]) -> dict[State, int]:
    return {State(int(state)): int(count) for state, count in rows}


def unfinished_sql(p: str) -> str:
    """A batch's unfinished members, newest first (cancelled in that order: see transitions/batches.py)."""
    return (
        f"SELECT execution_id FROM executions WHERE batch_id = {p} AND state < {FINISHED} ORDER BY seq DESC"
    )


def cancel_sql(p: str) -> str:
    return f"UPDATE batches SET cancelled_at = {p} WHERE batch_id = {p} AND cancelled_at = 0"
