"""Tokens and audit entries as rows: the SQL both stores share, with the placeholder each uses.

A token row never holds the token, only its SHA-256 digest. Migration for a store from before
token ids (schema 7) adds the columns and gives every older token a random id, so each can be
listed and revoked.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from flux.store.base import AUDIT_DAYS, AUDIT_KEPT, AuditRecord, TokenRecord

TOKEN_COLUMNS = "id, digest, tenant, role, created_at, name, expires_at, last_used_at, revoked, pool"
TOKEN_COLUMN_COUNT = TOKEN_COLUMNS.count(",") + 1
# Columns a tokens table from before schema 7 (8 for pool) lacks, with what older tokens get.
TOKEN_ADDED = (
    ("id", "TEXT NOT NULL DEFAULT ''"),
    ("name", "TEXT NOT NULL DEFAULT ''"),
    ("expires_at", "DOUBLE PRECISION"),
    ("last_used_at", "DOUBLE PRECISION"),
    ("revoked", "INTEGER NOT NULL DEFAULT 0"),
    ("pool", "TEXT NOT NULL DEFAULT ''"),
)
AUDIT_COLUMNS = "at, token_id, caller_tenant, caller_role, action, target, tenant, details_json"


def token_row(token: TokenRecord) -> tuple[Any, ...]:
    return (
        token.id, token.digest, token.tenant, token.role, token.created_at, token.name,
        token.expires_at, token.last_used_at, int(token.revoked), token.pool,
    )  # fmt: skip


def token_from_row(row: Sequence[Any]) -> TokenRecord:
    id_, digest, tenant, role, created_at, name, expires_at, last_used_at, revoked, pool = row
    return TokenRecord(
        id=id_, digest=digest, tenant=tenant, role=role, created_at=created_at, name=name,
        expires_at=expires_at, last_used_at=last_used_at, revoked=bool(revoked), pool=pool,
    )  # fmt: skip


def audit_row(entry: AuditRecord) -> tuple[Any, ...]:
    return (
        entry.at, entry.token_id, entry.caller_tenant, entry.caller_role, entry.action, entry.target,
        entry.tenant, entry.details_json,
    )  # fmt: skip


def audit_from_row(row: Sequence[Any]) -> AuditRecord:
    return AuditRecord(*row)


def tokens_query(tenant: str, p: str) -> tuple[str, tuple[Any, ...]]:
    where = f" AND tenant = {p}" if tenant else ""
    return (
        f"SELECT {TOKEN_COLUMNS} FROM tokens WHERE revoked = 0{where} ORDER BY created_at DESC, id",
        (tenant,) if tenant else (),
    )


def audit_query(since: float, tenant: str, limit: int, p: str) -> tuple[str, tuple[Any, ...]]:
    where, params = f"at >= {p}", [since]
    if tenant:
        where += f" AND tenant = {p}"
        params.append(tenant)
    return f"SELECT {AUDIT_COLUMNS} FROM audit WHERE {where} ORDER BY seq DESC LIMIT {p}", (*params, limit)


def audit_prune(p: str) -> tuple[str, tuple[Any, ...]]:
    """Drops entries past retention: older than AUDIT_DAYS, or beyond the newest AUDIT_KEPT."""
    cutoff = time.time() - AUDIT_DAYS * 86400
    return (
        f"DELETE FROM audit WHERE at < {p} OR seq <= (SELECT MAX(seq) FROM audit) - {p}",
        (cutoff, AUDIT_KEPT),
    )
