"""Schedules in the SQLite file: a mixin of ``SqliteStore`` (sqlite.py), which lends it its writer
and reader (``_change``, ``_read``); the SQL is schedule_rows.py's, shared with PostgreSQL."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

from flux.store import schedule_rows as rows
from flux.store.schedule_rows import FIRED, RUNS_KEPT, ScheduleRow, ScheduleRows, TickRun
from flux.store.sqlite_schema import transaction


class SqliteSchedules(ScheduleRows):
    # SqliteStore's: fn(connection) on its thread, with the writer or the reader.
    _change: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]
    _read: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]

    async def save_schedules(self, schedules: list[tuple[str, str, str, float]]) -> None:
        now = time.time()

        def write(db: sqlite3.Connection) -> None:
            with transaction(db):
                db.executemany(rows.save_sql("?"), [(t, n, spec, c, now) for t, n, spec, c in schedules])

        await self._change(write)

    async def set_schedule_paused(self, tenant: str, name: str, paused: bool, last_tick: float) -> bool:
        return await self._change(
            lambda db: (
                db.execute(rows.pause_sql("?"), (int(paused), last_tick, time.time(), tenant, name)).rowcount
                > 0
            )
        )

    async def delete_schedule(self, tenant: str, name: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            first, second = rows.delete_sqls("?")
            with transaction(db):
                gone = db.execute(first, (tenant, name)).rowcount
                db.execute(second, (tenant, name))
            return gone > 0

        return await self._change(write)

    async def list_schedules(self, tenant: str = "") -> list[ScheduleRow]:
        sql, params = rows.list_sql(tenant, "?")
        return await self._read(
            lambda db: [
                ScheduleRow(r[0], r[1], r[2], bool(r[3]), float(r[4])) for r in db.execute(sql, params)
            ]
        )

    async def claim_ticks(
        self, runs: list[TickRun], advances: list[tuple[str, str, float]]
    ) -> set[tuple[str, str, float]]:
        def write(db: sqlite3.Connection) -> set[tuple[str, str, float]]:
            claimed: set[tuple[str, str, float]] = set()
            with transaction(db):
                for run in runs:
                    count = db.execute(
                        rows.claim_sql("?"),
                        (run.tenant, run.schedule, run.tick, run.execution_id, run.result, run.at),
                    ).rowcount
                    if count == 0 and run.result == FIRED:
                        count = db.execute(
                            rows.unqueue_sql("?"), (run.at, run.tenant, run.schedule, run.tick)
                        ).rowcount
                    if count:
                        claimed.add(run.key)
                db.executemany(rows.advance_sql("?", "MAX"), [(c, t, n) for t, n, c in advances])
            return claimed

        return await self._change(write)

    async def list_runs(self, tenant: str, name: str, limit: int) -> list[TickRun]:
        return await self._read(
            lambda db: [rows.run_of(tuple(r)) for r in db.execute(rows.runs_sql("?"), (tenant, name, limit))]
        )

    async def latest_runs(self) -> list[TickRun]:
        def read(db: sqlite3.Connection) -> list[TickRun]:
            found = [rows.run_of(tuple(r)) for r in db.execute(rows.latest_fired_sql())]
            return found + [rows.run_of(tuple(r)) for r in db.execute(rows.queued_sql())]

        return await self._read(read)

    async def unsubmitted_runs(self, since: float, before: float) -> list[TickRun]:
        return await self._read(
            lambda db: [rows.run_of(tuple(r)) for r in db.execute(rows.unsubmitted_sql("?"), (before, since))]
        )

    async def prune_runs(self, keep: int = RUNS_KEPT) -> int:
        return await self._change(lambda db: db.execute(rows.prune_sql("?"), (keep,)).rowcount)
