"""Named limits in PostgreSQL: the shared SQL (flux/store/limit_rows.py), and each change announced.

A change commits with a ``NOTIFY flux_limits`` naming the replica that made it, so every other
replica reloads the limits at once (a limit created through one replica limits work submitted
through another from then on).
"""

from __future__ import annotations

import time
from typing import Any

from psycopg_pool import AsyncConnectionPool

from flux.store import limit_rows

_ANNOUNCE = "SELECT pg_notify('flux_limits', %s)"


async def save_limits(
    pool: AsyncConnectionPool[Any], replica_id: str, limits: list[tuple[str, str, str]]
) -> None:
    now = time.time()
    async with pool.connection() as db, db.transaction():
        for tenant, name, spec in limits:
            await db.execute(limit_rows.save_sql("%s"), (tenant, name, spec, now))
        await db.execute(_ANNOUNCE, (replica_id,))


async def delete_limit(pool: AsyncConnectionPool[Any], replica_id: str, tenant: str, name: str) -> bool:
    async with pool.connection() as db, db.transaction():
        cursor = await db.execute(limit_rows.delete_sql("%s"), (tenant, name))
        await db.execute(_ANNOUNCE, (replica_id,))
        return cursor.rowcount > 0


async def list_limits(pool: AsyncConnectionPool[Any], tenant: str = "") -> list[tuple[str, str, str]]:
    sql, params = limit_rows.list_sql(tenant, "%s")
    async with pool.connection() as db:
        cursor = await db.execute(sql, params)
        return [(row[0], row[1], row[2]) for row in await cursor.fetchall()]
