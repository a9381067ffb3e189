"""Schedules in PostgreSQL: a mixin of ``PostgresStore`` (store.py) over its pool of connections;
the SQL is schedule_rows.py's, shared with SQLite.

Every replica's ticker claims the same due ticks; ``INSERT … ON CONFLICT DO NOTHING RETURNING`` on
``schedule_runs``' primary key lets exactly one of them record each, and only that one submits
its run. Changes are not announced: each ticker reads the schedules again every few seconds.
"""

from __future__ import annotations

import time
from typing import Any

from psycopg_pool import AsyncConnectionPool

from flux.store import schedule_rows as rows
from flux.store.schedule_rows import FIRED, RUNS_KEPT, ScheduleRow, ScheduleRows, TickRun

_CLAIM = rows.claim_sql("%s") + " RETURNING tenant, schedule, tick"
_UNQUEUE = rows.unqueue_sql("%s") + " RETURNING tenant, schedule, tick"


class PostgresSchedules(ScheduleRows):
    _pool: AsyncConnectionPool[Any]

    async def save_schedules(self, schedules: list[tuple[str, str, str, float]]) -> None:
        now = time.time()
        async with self._pool.connection() as db, db.transaction():
            for tenant, name, spec, cursor in schedules:
                await db.execute(rows.save_sql("%s"), (tenant, name, spec, cursor, now))

    async def set_schedule_paused(self, tenant: str, name: str, paused: bool, last_tick: float) -> bool:
        async with self._pool.connection() as db:
            cursor = await db.execute(
                rows.pause_sql("%s"), (int(paused), last_tick, time.time(), tenant, name)
            )
            return cursor.rowcount > 0

    async def delete_schedule(self, tenant: str, name: str) -> bool:
        first, second = rows.delete_sqls("%s")
        async with self._pool.connection() as db, db.transaction():
            gone = (await db.execute(first, (tenant, name))).rowcount
            await db.execute(second, (tenant, name))
        return gone > 0

    async def list_schedules(self, tenant: str = "") -> list[ScheduleRow]:
        sql, params = rows.list_sql(tenant, "%s")
        async with self._pool.connection() as db:
            found = await (await db.execute(sql, params)).fetchall()
        return [ScheduleRow(r[0], r[1], r[2], bool(r[3]), float(r[4])) for r in found]

    async def claim_ticks(
        self, runs: list[TickRun], advances: list[tuple[str, str, float]]
    ) -> set[tuple[str, str, float]]:
        claimed: set[tuple[str, str, float]] = set()
        async with self._pool.connection() as db, db.transaction():
            for run in runs:
                cursor = await db.execute(
                    _CLAIM, (run.tenant, run.schedule, run.tick, run.execution_id, run.result, run.at)
                )
                won = await cursor.fetchone()
                if won is None and run.result == FIRED:
                    cursor = await db.execute(_UNQUEUE, (run.at, run.tenant, run.schedule, run.tick))
                    won = await cursor.fetchone()
                if won is not None:
                    claimed.add(run.key)
            for tenant, name, tick in advances:
                await db.execute(rows.advance_sql("%s", "GREATEST"), (tick, tenant, name))
        return claimed

    async def list_runs(self, tenant: str, name: str, limit: int) -> list[TickRun]:
        async with self._pool.connection() as db:
            found = await (await db.execute(rows.runs_sql("%s"), (tenant, name, limit))).fetchall()
        return [rows.run_of(tuple(r)) for r in found]

    async def latest_runs(self) -> list[TickRun]:
        async with self._pool.connection() as db:
            fired = await (await db.execute(rows.latest_fired_sql())).fetchall()
            queued = await (await db.execute(rows.queued_sql())).fetchall()
        return [rows.run_of(tuple(r)) for r in (*fired, *queued)]

    async def unsubmitted_runs(self, since: float, before: float) -> list[TickRun]:
        async with self._pool.connection() as db:
            found = await (await db.execute(rows.unsubmitted_sql("%s"), (before, since))).fetchall()
        return [rows.run_of(tuple(r)) for r in found]

    async def prune_runs(self, keep: int = RUNS_KEPT) -> int:
        async with self._pool.connection() as db:
            return (await db.execute(rows.prune_sql("%s"), (keep,))).rowcount
