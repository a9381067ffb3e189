"""PostgreSQL store: one database shared by several server replicas (see store.py)."""

from flux.store.postgres.store import PostgresStore, redacted

__all__ = ["PostgresStore", "redacted"]
