"""SQL shared by the PostgreSQL store's row writes and its cluster membership."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from flux.domain.execution import Execution, ExecutionError, State
from flux.store import notices
from flux.store.base import PendingRef
from flux.store.rows import EXECUTION_COLUMNS, execution_row

# An execution's row as ``rows`` writes it, and the replica that holds it.
COLUMNS = f"{EXECUTION_COLUMNS}, owner"
COLUMN_COUNT = COLUMNS.count(",") + 1
# Each column's type, in ``COLUMNS`` order (schema.py). A batch of rows is one statement: a
# statement per row cost psycopg about as much CPU as the rest of an execution's writes.
COLUMN_TYPES = (
    "text", "bigint", "text", "integer", "text", "text", "smallint", "text", "integer", "bigint", "integer",
    "text", "text", "text", "text", "double precision", "double precision", "integer", "text", "text",
    "text", "double precision", "text", "text", "text", "double precision", "double precision", "text", "text",
    "text", "text", "integer", "text", "text",
)  # fmt: skip
assert len(COLUMN_TYPES) == COLUMN_COUNT
# The batch travels as JSON text, taken apart by the database. Sent as one array per column,
# psycopg dumped each array element by element in Python: about 8 % of a replica's CPU when
# submissions come one by one.
FROM_JSON = (
    "SELECT " + ", ".join(f"(r->>{i})::{t}" for i, t in enumerate(COLUMN_TYPES))
    + " FROM jsonb_array_elements(%s::jsonb) AS r"
)  # fmt: skip
# A jsonb value holds at most 256 MiB, and a batch gathers whatever was saved during the commit
# before it (16 MiB inputs among them): texts are cut well under that, one statement each.
CHUNK_BYTES = 32 << 20


def rows_json(rows: list[tuple[object, ...]], most: int = CHUNK_BYTES) -> list[str]:
    """``rows`` (each in ``COLUMNS`` order) as the texts ``FROM_JSON`` takes: one for an ordinary
    batch, more where the rows together pass ``most`` characters (a row alone never is cut)."""
    text = json.dumps(rows, allow_nan=False)
    if len(text) <= most:
        return [text]
    texts: list[str] = []
    chunk: list[str] = []
    size = 0
    for row in rows:
        one = json.dumps(row, allow_nan=False)
        if chunk and size + len(one) > most:
            texts.append(f"[{','.join(chunk)}]")
            chunk, size = [], 0
        chunk.append(one)
        size += len(one) + 1
    texts.append(f"[{','.join(chunk)}]")
    return texts


def owned_row(e: Execution, replica_id: str) -> tuple[object, ...]:
    """The row in ``COLUMNS``: a dispatched or running execution is held by ``replica_id``, others by none."""
    held = e.state in (State.SCHEDULED, State.RUNNING)
    return (*execution_row(e), replica_id if held else "")


async def announce(db: psycopg.AsyncConnection[Any], written: list[Execution]) -> None:
    """Tell every replica (on commit) which rows became pending and which finished."""
    pending = [e for e in written if e.state is State.CREATED]
    done = [e for e in written if e.state.finished]
    for payload in notices.chunks(notices.pending_line(PendingRef.of(e)) for e in pending):
        await db.execute("SELECT pg_notify('flux_pending', %s)", (payload,))
    for payload in notices.chunks(e.execution_id for e in done):
        await db.execute("SELECT pg_notify('flux_done', %s)", (payload,))


def error_json(error: ExecutionError) -> str:
    return json.dumps([error.type, error.message, error.traceback])


def redacted(url: str) -> str:
    """A database URL without its password, for logs and errors."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"
