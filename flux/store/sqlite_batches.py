"""Batches in the SQLite file (the shared SQL of batch_rows.py): a mixin of ``SqliteStore``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from flux.domain.batch import Batch
from flux.domain.execution import State
from flux.store import batch_rows


class SqliteBatches:
    _read: Callable[[Callable[[sqlite3.Connection], Any]], Any]
    _change: Callable[[Callable[[sqlite3.Connection], Any]], Any]

    async def save_batch(self, batch: Batch) -> None:
        await self._change(lambda db: db.execute(batch_rows.save_sql("?"), batch_rows.batch_row(batch)))

    async def get_batch(self, batch_id: str) -> Batch | None:
        def read(db: sqlite3.Connection) -> Batch | None:
            row = db.execute(batch_rows.get_sql("?"), (batch_id,)).fetchone()
            return batch_rows.batch_from_row(tuple(row)) if row else None

        result: Batch | None = await self._read(read)
        return result

    async def batch_counts(self, batch_id: str) -> dict[State, int]:
        counts: dict[State, int] = await self._read(
            lambda db: batch_rows.counts_from_rows(db.execute(batch_rows.counts_sql("?"), (batch_id,)))
        )
        return counts

    async def batch_unfinished(self, batch_id: str) -> list[str]:
        ids: list[str] = await self._read(
            lambda db: [row[0] for row in db.execute(batch_rows.unfinished_sql("?"), (batch_id,))]
        )
        return ids

    async def cancel_batch(self, batch_id: str, at: float) -> bool:
        done: bool = await self._change(
            lambda db: db.execute(batch_rows.cancel_sql("?"), (at, batch_id)).rowcount > 0
        )
        return done
