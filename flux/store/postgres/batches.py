"""Batches in PostgreSQL (the shared SQL of flux/store/batch_rows.py): a mixin of ``PostgresStore``.

Every replica reads the same rows, so a batch made through one replica is read, joined and
cancelled through any other.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from flux.domain.batch import Batch
from flux.domain.execution import State
from flux.store import batch_rows


class BatchTables:
    _pool: AsyncConnectionPool[Any]

    async def save_batch(self, batch: Batch) -> None:
        async with self._pool.connection() as db:
            await db.execute(batch_rows.save_sql("%s"), batch_rows.batch_row(batch))

    async def get_batch(self, batch_id: str) -> Batch | None:
        async with self._pool.connection() as db:
            row = await (await db.execute(batch_rows.get_sql("%s"), (batch_id,))).fetchone()
        return batch_rows.batch_from_row(row) if row else None

    async def batch_counts(self, batch_id: str) -> dict[State, int]:
        async with self._pool.connection() as db:
            cursor = await db.execute(batch_rows.counts_sql("%s"), (batch_id,))
            return batch_rows.counts_from_rows(await cursor.fetchall())

    async def batch_unfinished(self, batch_id: str) -> list[str]:
        async with self._pool.connection() as db:
            cursor = await db.execute(batch_rows.unfinished_sql("%s"), (batch_id,))
            return [row[0] for row in await cursor.fetchall()]

    async def cancel_batch(self, batch_id: str, at: float) -> bool:
        async with self._pool.connection() as db:
            cursor = await db.execute(batch_rows.cancel_sql("%s"), (at, batch_id))
            return cursor.rowcount > 0
