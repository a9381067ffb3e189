"""Batches in both stores, against a real SQLite file and a real PostgreSQL database: the batch
row, its members counted by state and listed unfinished newest first, the cancel mark; and an
older SQLite file (version 11, before batches) migrated on open."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from flux.domain.batch import Batch
from flux.domain.execution import Execution, State, WorkflowRef
from flux.store.base import Store
from flux.store.postgres import PostgresStore
from flux.store.sqlite import SqliteStore
from flux.store.sqlite_schema import SCHEMA_VERSION

pytestmark = [pytest.mark.integration, pytest.mark.backends("sqlite", "postgres")]

BATCH = Batch("b-" + "e" * 24, "ml", "crunch", max_concurrent=2, created_at=5.0)


@pytest.fixture
async def store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    opened: Store
    if backend == "postgres":
        opened = PostgresStore(request.getfixturevalue("pg_url"), "test-replica")
    else:
        opened = SqliteStore(tmp_path / "flux.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def member(n: int, state: State, batch_id: str = BATCH.batch_id) -> Execution:
    return Execution(
        execution_id=f"m{n:02d}", workflow=WorkflowRef("crunch", 1, "0" * 64, "crunch"), seq=n,
        input_json=str(n), max_attempts=3, state=state, created_at=1.0, updated_at=1.0, tenant="ml",
        batch_id=batch_id, flow_keys=tuple(sorted(BATCH.flow_keys())) if batch_id else (),
    )  # fmt: skip


async def test_a_batch_and_its_members(store: Store) -> None:
    await store.save_batch(BATCH)
    states = [State.CREATED, State.CREATED, State.RUNNING, State.COMPLETED, State.FAILED, State.CANCELLED]
    for n, state in enumerate(states, start=1):
        await store.save(member(n, state))
    await store.save(member(9, State.CREATED, batch_id=""))  # not a member
    assert await store.get_batch(BATCH.batch_id) == BATCH
    assert await store.get_batch("b-" + "f" * 24) is None
    assert await store.batch_counts(BATCH.batch_id) == {
        State.CREATED: 2, State.RUNNING: 1, State.COMPLETED: 1, State.FAILED: 1, State.CANCELLED: 1,
    }  # fmt: skip
    assert await store.batch_unfinished(BATCH.batch_id) == ["m03", "m02", "m01"]
    stored = await store.get_execution("m01")
    assert stored is not None and (stored.batch_id, stored.flow_keys) == (BATCH.batch_id, BATCH.flow_keys())
    assert await store.cancel_batch(BATCH.batch_id, 7.0)
    assert not await store.cancel_batch(BATCH.batch_id, 8.0)  # once
    cancelled = await store.get_batch(BATCH.batch_id)
    assert cancelled is not None and cancelled.cancelled_at == 7.0


@pytest.mark.backends("sqlite")
async def test_a_version_11_sqlite_file_gains_batches(tmp_path: Path) -> None:
    path = tmp_path / "v11.db"
    first = SqliteStore(path)
    await first.open()
    await first.save(member(1, State.CREATED, batch_id=""))
    await first.close()
    db = sqlite3.connect(path)
    db.executescript(
        "DROP INDEX executions_by_batch; DROP TABLE batches; ALTER TABLE executions DROP COLUMN batch_id;"
        "ALTER TABLE executions DROP COLUMN gang; ALTER TABLE workflows DROP COLUMN gang;"
        "UPDATE meta SET value = '11' WHERE key = 'schema_version';"
    )
    db.commit()
    db.close()
    store = SqliteStore(path)
    recovered = await store.open()
    try:
        assert [(e.execution_id, e.batch_id) for e in recovered.unfinished] == [("m01", "")]
        await store.save_batch(BATCH)
        await store.save(member(2, State.CREATED))
        assert await store.batch_counts(BATCH.batch_id) == {State.CREATED: 1}
        version = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key = 'schema_version'")
        assert version.fetchone()[0] == str(SCHEMA_VERSION)  # 13 or later: migrated to the current
    finally:
        await store.close()


@pytest.mark.backends("postgres")
async def test_a_replica_cancels_many_executions_guarded_in_one_transaction(
    store: Store, pg_url: str
) -> None:
    import psycopg

    assert isinstance(store, PostgresStore)
    states = [State.CREATED, State.SCHEDULED, State.RUNNING, State.COMPLETED, State.FAILED, State.CREATED]
    for n, state in enumerate(states):
        await store.save(member(n, state))
    listener = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await listener.execute("LISTEN flux_cancel")
        await listener.execute("LISTEN flux_done")
        cancelled = await store.cancel_many(["m00", "m01", "m02", "m03", "m04", "nobody"], 9.0)
        # The unfinished ones, each as its row now is; finished and unknown ones left as they are.
        assert sorted(e.execution_id for e in cancelled) == ["m00", "m01", "m02"]
        assert all(e.state is State.CANCELLED and e.updated_at == 9.0 for e in cancelled)
        rows = {e: (await store.get_execution(e)) for e in ("m00", "m03", "m04", "m05")}
        assert [rows[e].state for e in ("m00", "m03", "m04", "m05")] == [  # type: ignore[union-attr]
            State.CANCELLED, State.COMPLETED, State.FAILED, State.CREATED,
        ]  # fmt: skip
        heard = [(n.channel, n.payload) async for n in listener.notifies(timeout=2.0, stop_after=6)]
        assert sorted(heard) == sorted(
            (c, e) for c in ("flux_cancel", "flux_done") for e in ("m00", "m01", "m02")
        )
        assert await store.cancel_many(["m00", "m01"], 10.0) == []  # once
        assert await store.cancel_many([], 10.0) == []
    finally:
        await listener.close()
