"""Errors that are not refusals still leave the servicers through the one error table: each
store driver's "the database is away" is UNAVAILABLE (retryable), anything else INTERNAL.

The same table behind a real ``grpc.aio`` server, over a store that raises what psycopg
raises while PostgreSQL restarts, is tests/integration/test_store_unavailable.py.
"""

from __future__ import annotations

import psycopg
import pytest

from flux.errors import Internal, Unavailable, refusal, status_of
from flux.store.sqlite import SqliteStore

pytestmark = pytest.mark.timeout(20)


def test_the_table_maps_each_store_driver_and_nothing_else() -> None:
    import sqlite3

    away = refusal(sqlite3.OperationalError("database is locked"), SqliteStore.unavailable)
    assert isinstance(away, Unavailable) and status_of(away)[1] == 503
    assert isinstance(refusal(sqlite3.IntegrityError("UNIQUE"), SqliteStore.unavailable), Internal)
    assert isinstance(refusal(psycopg.errors.AdminShutdown("x"), SqliteStore.unavailable), Internal)
    bug = refusal(ValueError("line one\nline two"))
    assert status_of(bug)[1] == 500 and "\n" not in str(bug)
