"""Ending a waiting row FAILED, once, whichever replica decides it.

Every replica mirrors the pending queue, so every replica arms a pending row's pending timeout
and judges it under ``--infeasible-after``; two of them may decide at the same moment. The row
ends only if it is still CREATED at the generation the deciding replica saw (a claim bumps the
generation, so a row claimed, run and retried meanwhile is not the one it judged): one replica's
update lands, the other's finds nothing and lets go of its copy.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from flux.domain.execution import Execution, ExecutionError
from flux.store.postgres.rows import COLUMNS
from flux.store.rows import CREATED, FAILED, error_to_json, execution_from_row

_FAIL = f"""
UPDATE executions SET state = {FAILED}, reason = %s, error = %s, updated_at = %s, owner = ''
WHERE execution_id = %s AND state = {CREATED} AND generation = %s
RETURNING {COLUMNS}
"""


async def fail_waiting(
    db: psycopg.AsyncConnection[Any],
    execution_id: str,
    generation: int,
    reason: str,
    error: ExecutionError,
    now: float,
) -> Execution | None:
    """The row as it ended, or None when it was no longer CREATED at ``generation``."""
    async with db.transaction():
        cursor = db.cursor(row_factory=dict_row)
        await cursor.execute(_FAIL, (reason, error_to_json(error), now, execution_id, generation))
        row = await cursor.fetchone()
        if row is None:
            return None
        await db.execute("SELECT pg_notify('flux_done', %s)", (execution_id,))
        return execution_from_row(row)
