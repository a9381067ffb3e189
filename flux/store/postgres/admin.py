"""The administrative tables of a shared database: pools, tenants (each change notified to every
replica), tokens and the audit trail. A mixin of ``PostgresStore`` (store.py), its own module
because these are one-off reads and writes the execution path never touches, and store.py keeps
opening, closing, executions and claims.
"""

from __future__ import annotations

import time

from psycopg_pool import AsyncConnectionPool

from flux.store.admin_rows import (
    AUDIT_COLUMNS,
    TOKEN_COLUMN_COUNT,
    TOKEN_COLUMNS,
    audit_from_row,
    audit_prune,
    audit_query,
    audit_row,
    token_from_row,
    token_row,
    tokens_query,
)
from flux.store.base import AuditRecord, TokenRecord
from flux.store.postgres.limits import delete_limit, list_limits, save_limits


class AdminTables:
    """Pools, tenants, tokens and audit over the store's pool of connections (store.py)."""

    _pool: AsyncConnectionPool
    replica_id: str
    replica_id: str

    async def save_pools(self, pools: list[tuple[str, str]]) -> None:
        now = time.time()
        async with self._pool.connection() as db, db.transaction():
            for name, spec in pools:
                await db.execute(
                    "INSERT INTO pools VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                    "spec = excluded.spec, updated_at = excluded.updated_at",
                    (name, spec, now),
                )

    async def list_pools(self) -> list[tuple[str, str]]:
        async with self._pool.connection() as db:
            cursor = await db.execute("SELECT name, spec FROM pools ORDER BY name")
            return [(row[0], row[1]) for row in await cursor.fetchall()]

    async def save_tenants(self, tenants: list[tuple[str, str]]) -> None:
        now = time.time()
        async with self._pool.connection() as db, db.transaction():
            for name, spec in tenants:
                await db.execute(
                    "INSERT INTO tenants VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                    "spec = excluded.spec, updated_at = excluded.updated_at",
                    (name, spec, now),
                )
            await db.execute("SELECT pg_notify('flux_tenants', %s)", (self.replica_id,))

    async def delete_tenant(self, name: str, tombstone: str) -> bool:
        async with self._pool.connection() as db, db.transaction():
            cursor = await db.execute("DELETE FROM tenants WHERE name = %s", (name,))
            await db.execute("DELETE FROM tokens WHERE tenant = %s", (name,))
            await db.execute("UPDATE executions SET tenant = %s WHERE tenant = %s", (tombstone, name))
            await db.execute("UPDATE workflows SET tenant = %s WHERE tenant = %s", (tombstone, name))
            await db.execute("SELECT pg_notify('flux_tenants', %s)", (self.replica_id,))
            return cursor.rowcount > 0

    async def list_tenants(self) -> list[tuple[str, str]]:
        async with self._pool.connection() as db:
            cursor = await db.execute("SELECT name, spec FROM tenants ORDER BY name")
            return [(row[0], row[1]) for row in await cursor.fetchall()]

    async def save_limits(self, limits: list[tuple[str, str, str]]) -> None:
        await save_limits(self._pool, self.replica_id, limits)

    async def delete_limit(self, tenant: str, name: str) -> bool:
        return await delete_limit(self._pool, self.replica_id, tenant, name)

    async def list_limits(self, tenant: str = "") -> list[tuple[str, str, str]]:
        return await list_limits(self._pool, tenant)

    async def save_token(self, token: TokenRecord) -> None:
        async with self._pool.connection() as db:
            await db.execute(
                f"INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ({', '.join(['%s'] * TOKEN_COLUMN_COUNT)})",
                token_row(token),
            )

    async def find_token(self, digest: str) -> TokenRecord | None:
        async with self._pool.connection() as db:
            cursor = await db.execute(f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE digest = %s", (digest,))
            row = await cursor.fetchone()
            return token_from_row(row) if row else None

    async def list_tokens(self, tenant: str = "") -> list[TokenRecord]:
        async with self._pool.connection() as db:
            cursor = await db.execute(*tokens_query(tenant, "%s"))
            return [token_from_row(row) for row in await cursor.fetchall()]

    async def revoke_token(self, token_id: str, tenant: str = "") -> TokenRecord | None:
        async with self._pool.connection() as db, db.transaction():
            cursor = await db.execute(
                f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = %s AND revoked = 0 FOR UPDATE", (token_id,)
            )
            row = await cursor.fetchone()
            if row is None or (tenant and row[2] != tenant):
                return None
            await db.execute("UPDATE tokens SET revoked = 1 WHERE id = %s", (token_id,))
            return token_from_row(row)

    async def touch_token(self, token_id: str, at: float) -> None:
        async with self._pool.connection() as db:
            await db.execute("UPDATE tokens SET last_used_at = %s WHERE id = %s", (at, token_id))

    async def save_audit(self, entry: AuditRecord) -> None:
        async with self._pool.connection() as db, db.transaction():
            await db.execute(
                f"INSERT INTO audit ({AUDIT_COLUMNS}) VALUES ({', '.join(['%s'] * 8)})", audit_row(entry)
            )
            await db.execute(*audit_prune("%s"))

    async def list_audit(self, since: float = 0.0, tenant: str = "", limit: int = 1000) -> list[AuditRecord]:
        async with self._pool.connection() as db:
            cursor = await db.execute(*audit_query(since, tenant, limit, "%s"))
            return [audit_from_row(row) for row in await cursor.fetchall()]
