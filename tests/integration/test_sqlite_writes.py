"""Where the SQLite store writes, against a real file: a small batch of rows on the event loop,
a large one (or one while the thread holds the writer) on the thread, and the WAL checkpointed
on a thread of its own, so the rows reach the database file itself and a checkpoint in progress
holds up no write.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from flux.domain.execution import Execution, State, WorkflowRef
from flux.store import sqlite as sqlite_store
from flux.store.sqlite import SqliteStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def _execution(n: int) -> Execution:
    return Execution(
        execution_id=f"e{n:04d}",
        workflow=WorkflowRef("echo", 1, "0" * 64, "echo"),
        seq=n,
        input_json=str(n),
        max_attempts=3,
        state=State.CREATED,
        created_at=1000.0 + n,
        updated_at=1000.0 + n,
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "flux.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def writers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(thread name, rows) of each write of rows the store runs: bound row by row on the loop
    (``upsert``), or a batch on the thread (``upsert_executions``, sqlite_bulk.py)."""
    seen: list[tuple[str, int]] = []
    upsert, upsert_executions = sqlite_store.upsert, sqlite_store.upsert_executions

    def recorded(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
        seen.append((threading.current_thread().name, len(rows)))
        upsert(db, rows)

    def recorded_batch(db: sqlite3.Connection, batch: list[Execution]) -> None:
        seen.append((threading.current_thread().name, len(batch)))
        upsert_executions(db, batch)

    monkeypatch.setattr(sqlite_store, "upsert", recorded)
    monkeypatch.setattr(sqlite_store, "upsert_executions", recorded_batch)
    return seen


def _stored(path: Path, only_the_database_file: bool = False) -> int:
    # immutable=1 reads the database file alone, ignoring the WAL: what a checkpoint copied.
    uri = f"file:{path}?immutable=1" if only_the_database_file else f"file:{path}"
    db = sqlite3.connect(uri, uri=True)
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'executions'").fetchone():
            return 0  # the schema itself is still in the WAL
        return int(db.execute("SELECT COUNT(*) FROM executions").fetchone()[0])
    finally:
        db.close()


async def test_a_small_batch_commits_on_the_loop_and_a_large_one_on_the_thread(
    store: SqliteStore, writers: list[tuple[str, int]]
) -> None:
    await store.save(_execution(1))
    large = sqlite_store.INLINE_ROWS + 1
    await asyncio.gather(*(store.save(_execution(n)) for n in range(2, 2 + large)))
    assert writers == [
        (threading.current_thread().name, 1),
        (writers[1][0], large),
    ] and writers[1][0].startswith("flux-sqlite")
    assert _stored(store.path) == 1 + large
    assert (await store.get_execution("e0002")) == _execution(2)


async def test_a_small_batch_goes_to_the_thread_while_a_write_there_holds_the_writer(
    store: SqliteStore, writers: list[tuple[str, int]]
) -> None:
    store._writing.acquire()  # as a long write on the thread would
    try:
        saved = store.save(_execution(1))
        for _ in range(20):  # the loop runs on: the save waits on the thread, not here
            await asyncio.sleep(0.005)
        assert not saved.done() and writers == []
    finally:
        store._writing.release()
    await saved
    assert writers[0][0].startswith("flux-sqlite") and _stored(store.path) == 1


async def test_the_wal_is_checkpointed_on_the_thread_every_so_many_commits(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_EVERY", 4)
    for n in range(3):
        await store.save(_execution(n))
    assert store._checkpoint is None
    assert _stored(store.path, only_the_database_file=True) == 0  # all still in the WAL only
    await store.save(_execution(3))
    checkpoint = store._checkpoint
    assert checkpoint is not None
    await checkpoint
    assert _stored(store.path, only_the_database_file=True) == 4


async def test_a_failed_checkpoint_is_logged_and_the_next_one_tries_again(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_EVERY", 2)
    checkpoint = store._checkpointer.checkpoint
    failures = iter([sqlite3.OperationalError("disk I/O error")])

    async def failing_once() -> object:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return await checkpoint()

    monkeypatch.setattr(store._checkpointer, "checkpoint", failing_once)
    for n in range(2):
        await store.save(_execution(n))
    failed = store._checkpoint
    assert failed is not None
    with pytest.raises(sqlite3.OperationalError):
        await failed
    await asyncio.sleep(0)  # its done callback
    assert store._checkpoint is None
    assert "checkpointing" in caplog.text and "disk I/O error" in caplog.text
    assert _stored(store.path, only_the_database_file=True) == 0  # commits went on meanwhile
    for n in range(2, 4):
        await store.save(_execution(n))
    again = store._checkpoint
    assert again is not None
    await again
    assert _stored(store.path, only_the_database_file=True) == 4


async def test_a_checkpoint_in_progress_holds_up_no_write_on_the_thread(
    store: SqliteStore, writers: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch too large for the loop commits on the store's thread while a checkpoint takes long."""
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_EVERY", 1)
    slow, unblock = threading.Event(), threading.Event()
    checkpoint = store._checkpointer._checkpoint

    def held() -> tuple[int, int, int]:
        slow.set()
        unblock.wait(10)
        return checkpoint()

    monkeypatch.setattr(store._checkpointer, "_checkpoint", held)
    await store.save(_execution(1))  # its commit starts a checkpoint
    held_checkpoint = store._checkpoint
    assert held_checkpoint is not None
    try:
        assert await asyncio.to_thread(slow.wait, 10)
        large = sqlite_store.INLINE_ROWS + 1
        await asyncio.wait_for(asyncio.gather(*(store.save(_execution(n)) for n in range(2, 2 + large))), 5)
        assert writers[-1][0].startswith("flux-sqlite") and writers[-1][1] == large
        assert not held_checkpoint.done()
    finally:
        unblock.set()
    await held_checkpoint
    assert _stored(store.path, only_the_database_file=True) == 1 + large
