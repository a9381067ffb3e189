"""Named limits as both stores keep them: one row per (tenant, name), the limit's terms as JSON.

The SQL is shared by SQLite and PostgreSQL (``p`` is the placeholder, ``?`` or ``%s``), so the
two stores cannot drift. A change is one transaction: ``flux limit apply`` stores every limit
of its file or none.
"""

from __future__ import annotations

LIMITS_TABLE = (
    "CREATE TABLE IF NOT EXISTS limits (tenant TEXT NOT NULL, name TEXT NOT NULL, spec TEXT NOT NULL, "
    "updated_at {real} NOT NULL, PRIMARY KEY (tenant, name));"
)


def save_sql(p: str) -> str:
    return (
        f"INSERT INTO limits VALUES ({p},{p},{p},{p}) ON CONFLICT (tenant, name) DO UPDATE SET "
        "spec = excluded.spec, updated_at = excluded.updated_at"
    )


def delete_sql(p: str) -> str:
    return f"DELETE FROM limits WHERE tenant = {p} AND name = {p}"


def list_sql(tenant: str, p: str) -> tuple[str, tuple[str, ...]]:
    if tenant:
        return f"SELECT tenant, name, spec FROM limits WHERE tenant = {p} ORDER BY tenant, name", (tenant,)
    return "SELECT tenant, name, spec FROM limits ORDER BY tenant, name", ()
