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

# A pg_advisory lock key: "FLUX"+6 (schema.py, cluster.py, store.py, quota.py and flow.py hold the others).
SCHEDULE_LOCK = 0x464C555E
_UNNESTED = "unnest(%s::text[], %s::text[], %s::float8[], %s::text[], %s::text[], %s::float8[])"
_CLAIM_MANY = f"INSERT INTO schedule_runs SELECT * FROM {_UNNESTED} ON CONFLICT DO NOTHING RETURNING tenant, schedule, tick"
_UNQUEUE_MANY = (
    f"UPDATE schedule_runs r SET result = '{FIRED}', at = u.at FROM {_UNNESTED} "
    "AS u(tenant, schedule, tick, execution_id, result, at) WHERE r.tenant = u.tenant AND "
    f"r.schedule = u.schedule AND r.tick = u.tick AND r.result = '{rows.QUEUED}' "
    "RETURNING r.tenant, r.schedule, r.tick"
)
_ADVANCE_MANY = (
    "UPDATE schedules s SET last_tick = GREATEST(s.last_tick, a.tick) FROM "
    "unnest(%s::text[], %s::text[], %s::float8[]) AS a(tenant, name, tick) "
    "WHERE s.tenant = a.tenant AND s.name = a.name"
)


def _columns(runs: list[TickRun]) -> tuple[list[Any], ...]:
    return (
        [r.tenant for r in runs], [r.schedule for r in runs], [r.tick for r in runs],
        [r.execution_id for r in runs], [r.result for r in runs], [r.at for r in runs],
    )  # fmt: skip


class PostgresSchedules(ScheduleRows):
    _pool: AsyncConnectionPool[Any]

    async def save_schedules(self, schedules: list[tuple[str, str, str, float]]) -> None:
        now = time.time()
        async with self._pool.connection() as db, db.transaction(), db.cursor() as cursor:
            await cursor.executemany(
                rows.save_sql("%s"), [(t, n, spec, c, now) for t, n, spec, c in schedules]
            )

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
        runs = sorted(runs, key=lambda r: r.key)
        fired_again = [r for r in runs if r.result == FIRED]
        claimed: set[tuple[str, str, float]] = set()
        async with self._pool.connection() as db, db.transaction():
            # The replicas' tickers claim the same ticks at the same moments: one at a time, so
            # neither waits on the other's row locks in another order (a deadlock).
            await db.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEDULE_LOCK,))
            if runs:
                cursor = await db.execute(_CLAIM_MANY, _columns(runs))
                claimed = {(t, s, float(k)) for t, s, k in await cursor.fetchall()}
            queued = [r for r in fired_again if r.key not in claimed]
            if queued:
                cursor = await db.execute(_UNQUEUE_MANY, _columns(queued))
                claimed |= {(t, s, float(k)) for t, s, k in await cursor.fetchall()}
            if advances:
                ordered = sorted(advances)
                await db.execute(
                    _ADVANCE_MANY,
                    ([a[0] for a in ordered], [a[1] for a in ordered], [a[2] for a in ordered]),
                )
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
