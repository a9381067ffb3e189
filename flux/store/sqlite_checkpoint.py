"""The SQLite WAL's checkpoints, on a thread and a connection of their own.

A checkpoint copies the WAL into the database file and fsyncs it: milliseconds. On the store's
one thread it queued every write and read handed there meanwhile behind it: a batch of two rows
(a dependency's final state and the dependent it releases) waited out the checkpoint, which was
the 99th percentile of ``python -m bench graphs`` (3 of 200 pairs, 4-5 ms instead of 0.3).
``PRAGMA wal_checkpoint(PASSIVE)`` never waits for (nor blocks) a reader or a writer, so on its
own connection it runs beside them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["Checkpointer"]


class Checkpointer:
    def __init__(self, path: Path):
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flux-sqlite-checkpoint")
        self._db: sqlite3.Connection | None = None  # the thread's only, opened at the first checkpoint

    async def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: (busy, WAL frames, frames checkpointed), as SQLite answers."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._checkpoint)

    def _checkpoint(self) -> tuple[int, int, int]:
        if self._db is None:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        busy, frames, copied = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return busy, frames, copied

    async def close(self) -> None:
        """Close the connection (never the last one: the store's writer closes after it)."""

        db, self._db = self._db, None
        if db is not None:  # on its thread, after any checkpoint still running there
            await asyncio.get_running_loop().run_in_executor(self._executor, db.close)
        self._executor.shutdown(wait=True)
