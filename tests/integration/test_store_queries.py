"""The listing queries of both stores, against a real SQLite file and a real PostgreSQL database.

Same rows, same answers: filters, newest-first order with ties broken by id,
and pages that continue exactly after the token, also while rows are added.
And every stored field comes back as it was written, however the store encodes
the row on its way (PostgreSQL: one JSON text per batch).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import psycopg
import pytest

from flux.dispatcher.reads.listing import execution_query, page_token
from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.store import notices
from flux.store.base import Conflict, ExecutionQuery, PendingRef, Store
from flux.store.postgres import PostgresStore, writer
from flux.store.postgres.rows import announce, rows_json
from flux.store.rows import execution_row
from flux.store.sqlite import SqliteStore

pytestmark = [pytest.mark.integration, pytest.mark.backends("sqlite", "postgres")]


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


@pytest.fixture
async def replica(pg_url: str) -> AsyncIterator[PostgresStore]:
    """One replica's store on the test database (only replicas insert rows already dispatched)."""
    opened = PostgresStore(pg_url, "test-replica")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def _execution(
    n: int, seq: int, workflow: str, state: State, worker: str = "", created: float = 0.0
) -> Execution:
    return Execution(
        execution_id=f"e{n:03d}",
        workflow=WorkflowRef(workflow, 1, "0" * 64, workflow),
        seq=seq,
        input_json=str(n),
        max_attempts=3,
        state=state,
        worker=worker,
        created_at=created or 1000.0 + n,
        updated_at=created or 1000.0 + n,
    )


ROWS = [
    # Two rows share seq 5 (replicas take time-based seqs): the id breaks the tie.
    _execution(1, 1, "echo", State.COMPLETED, "a"),
    _execution(2, 2, "echo", State.FAILED, "b"),
    _execution(3, 3, "train", State.CREATED),
    _execution(4, 5, "echo", State.COMPLETED, "a"),
    _execution(5, 5, "train", State.RUNNING, "b"),
    _execution(6, 6, "echo", State.CANCELLED),
]


async def _save_all(store: Store, rows: list[Execution]) -> None:
    for row in rows:
        await store.save(row)


def _ids(rows: list[Execution]) -> list[str]:
    return [r.execution_id for r in rows]


async def test_filters_and_order(store: Store) -> None:
    await _save_all(store, ROWS)
    everything = await store.list_executions(ExecutionQuery(limit=100))
    assert _ids(everything) == ["e006", "e005", "e004", "e003", "e002", "e001"]
    assert everything[1] == ROWS[4]  # whole records come back

    async def ids(**filters: object) -> list[str]:
        return _ids(await store.list_executions(ExecutionQuery(limit=100, **filters)))  # type: ignore[arg-type]

    assert await ids(states=(int(State.COMPLETED), int(State.CREATED))) == ["e004", "e003", "e001"]
    assert await ids(workflow="echo") == ["e006", "e004", "e002", "e001"]
    assert await ids(worker="b") == ["e005", "e002"]
    assert await ids(workflow="echo", worker="a", states=(int(State.COMPLETED),)) == ["e004", "e001"]
    assert await ids(created_after=1004.0) == ["e006", "e005", "e004"]
    assert await ids(workflow="nope") == []
    # unfinished_too widens only the state and worker filters: the dispatcher filters again.
    assert await ids(worker="a", unfinished_too=True) == ["e005", "e004", "e003", "e001"]
    assert await ids(worker="a", workflow="echo", unfinished_too=True) == ["e004", "e001"]


async def test_pages_continue_after_the_token_while_rows_arrive(store: Store) -> None:
    await _save_all(store, ROWS)
    first = await store.list_executions(ExecutionQuery(limit=3))
    assert _ids(first) == ["e006", "e005", "e004"]
    # A newer submission arrives between pages: it does not shift the next page.
    await store.save(_execution(7, 9, "echo", State.CREATED))
    last = first[-1]
    query = execution_query((), page_size=3, token=page_token(last.seq, last.execution_id))
    second = await store.list_executions(query)
    assert _ids(second) == ["e003", "e002", "e001"]
    assert await store.list_executions(replace(query, after=(1, "e001"))) == []
    # Through the tie at seq 5: e005 then e004, never both or neither.
    assert _ids(await store.list_executions(ExecutionQuery(limit=10, after=(5, "e005")))) == [
        "e004",
        "e003",
        "e002",
        "e001",
    ]


async def test_workflow_versions_with_file_names_and_runtime(store: Store) -> None:
    record = WorkflowRecord(
        name="train", version=0, source_hash="", entrypoint="train", requests=ResourceRequest(cpu=2),
        affinity=MappingProxyType({"role": "gpu"}), max_attempts=3,
    )  # fmt: skip
    await store.register_workflows("a.py", "v1 = 1\n", "1" * 64, [record])
    await store.register_workflows(
        "b.py", "v2 = 2\n", "2" * 64, [record, replace(record, name="node_thing", runtime="node")]
    )
    listed = await store.list_workflows()
    assert [(r.name, r.version, r.filename, r.runtime) for r in listed] == [
        ("node_thing", 1, "b.py", "node"), ("train", 1, "a.py", "python"), ("train", 2, "b.py", "python")
    ]  # fmt: skip
    assert all(
        r.registered_at > 0 and r.requests.cpu == 2 and dict(r.affinity) == {"role": "gpu"} for r in listed
    )
    assert [r.version for r in await store.list_workflows("train")] == [1, 2]
    assert await store.list_workflows("missing") == []


@pytest.mark.backends("sqlite")
async def test_a_version_1_sqlite_file_gains_the_runtime_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE workflows (name TEXT NOT NULL, version INTEGER NOT NULL, source_hash TEXT NOT NULL, "
        "entrypoint TEXT NOT NULL, requests TEXT NOT NULL, affinity TEXT NOT NULL, max_attempts INTEGER NOT NULL, "
        "created_at REAL NOT NULL, PRIMARY KEY (name, version));"
        "INSERT INTO workflows VALUES ('old', 1, 'h', 'old', "
        '\'{"cpu": 0, "memory": 0, "gpu": 0, "disk": 0, "packages": []}\', \'{}\', 3, 5.0);'
    )
    db.commit()
    db.close()
    store = SqliteStore(path)
    recovered = await store.open()
    try:
        assert [(w.name, w.runtime) for w in recovered.workflows] == [("old", "python")]
        await store.register_workflows(
            "n.py", "x = 1\n", "3" * 64, [replace(recovered.workflows[0], runtime="node")]
        )
        assert [(w.version, w.runtime) for w in await store.list_workflows("old")] == [
            (1, "python"),
            (2, "node"),
        ]
    finally:
        await store.close()


async def test_priorities_are_stored_with_workflows_and_executions(store: Store) -> None:
    record = WorkflowRecord(
        name="urgent", version=0, source_hash="", entrypoint="urgent", requests=ResourceRequest(),
        affinity=MappingProxyType({}), max_attempts=3, priority=7,
    )  # fmt: skip
    await store.register_workflows("u.py", "u = 1\n", "4" * 64, [record])
    assert [w.priority for w in await store.list_workflows("urgent")] == [7]
    await store.save(replace(_execution(1, 1, "urgent", State.CREATED), priority=-3))
    stored = await store.get_execution("e001")
    assert stored is not None and stored.priority == -3


@pytest.mark.backends("sqlite")
async def test_a_version_2_sqlite_file_gains_the_priority_columns(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    first = SqliteStore(path)
    await first.open()
    await first.close()
    # Back to version 2: the same tables without the priority columns (nor version 4's trace).
    db = sqlite3.connect(path)
    # Nor any column or table a version after it added.
    later = (
        "policy", "not_before", "reason", "attempts", "heartbeat", "started_at", "run_time", "flow_keys", "batch_id",
        "after_ids", "after_when", "waiting", "gang",
    )  # fmt: skip
    db.executescript(
        "DROP INDEX executions_by_batch; DROP TABLE batches;"
        + "".join(f"ALTER TABLE executions DROP COLUMN {column};" for column in later)
        + "ALTER TABLE workflows DROP COLUMN priority; ALTER TABLE executions DROP COLUMN priority;"
        "ALTER TABLE executions DROP COLUMN tenant; ALTER TABLE executions DROP COLUMN trace;"
        "ALTER TABLE workflows DROP COLUMN tenant; ALTER TABLE workflows DROP COLUMN policy;"
        "ALTER TABLE workflows DROP COLUMN flow; ALTER TABLE workflows DROP COLUMN placement;"
        "ALTER TABLE workflows DROP COLUMN gang;"
        "DROP TABLE tenants; DROP TABLE tokens;"
        "DROP TABLE audit; DROP TABLE limits;"
        "UPDATE meta SET value = '2' WHERE key = 'schema_version';"
        "INSERT INTO workflows VALUES ('old', 1, 'h', 'old', "
        '\'{"cpu": 0, "memory": 0, "gpu": 0, "disk": 0, "packages": []}\', \'{}\', 3, 5.0, \'python\');'
        "INSERT INTO executions VALUES ('e1', 1, 'old', 1, 'h', 'old', 1, '', 1, 0, 3, 'null', '', NULL, "
        "'[]', 5.0, 5.0);"
    )
    db.commit()
    db.close()
    store = SqliteStore(path)
    recovered = await store.open()
    try:
        # Migrated on open: priority 0, and the default tenant's (shared by every tenant).
        assert [(w.name, w.priority, w.tenant, w.placement) for w in recovered.workflows] == [
            ("old", 0, "default", "")  # and no placement of its own: the server's
        ]
        assert [(e.execution_id, e.priority) for e in recovered.unfinished] == [("e1", 0)]
        await store.save(replace(recovered.unfinished[0], execution_id="e2", seq=2, priority=9))
        stored = await store.get_execution("e2")
        assert stored is not None and stored.priority == 9
    finally:
        await store.close()


def _awkward(execution_id: str, state: State, worker: str) -> Execution:
    """Values a text encoding of the row could bend: floats to the last bit, quotes, backslashes,
    escapes spelled out, characters beyond ASCII, line separators, the largest seq."""
    text = 'a "quoted" \\ back\\slash, \\u0000 spelled out, tab\t, new\nline, \u2028, émoji 🚀'
    return Execution(
        execution_id=execution_id,
        workflow=WorkflowRef("wf-ü", 7, "f" * 64, "wf_ü"),
        seq=2**62 + 1,
        input_json=json.dumps({"text": text, "n": 0.1 + 0.2}),
        max_attempts=5,
        state=state,
        worker=worker,
        attempt=3,
        generation=2**40,
        output_json=json.dumps([text]) if state is State.COMPLETED else "",
        error=ExecutionError("Boom", text, "Traceback:\n  " + text) if state is State.FAILED else None,
        gpu_indices=(0, 3) if worker else (),
        created_at=1_765_000_000.123_456_7,
        updated_at=1_765_000_000.1 + 0.2,
        priority=-3,
        tenant="team-ø",
        trace="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        not_before=5e-324,
        reason=text,
        heartbeat=json.dumps({"step": text}),
        started_at=1_765_000_000.999_999_9,
        run_time=1e-9,
        batch_id="batch-1",
        after=("e-one", "e-two"),
        when="finished",
    )


@pytest.mark.parametrize("state", [State.CREATED, State.RUNNING, State.COMPLETED, State.FAILED])
async def test_every_stored_field_comes_back_exactly(store: Store, state: State) -> None:
    worker = "" if state is State.CREATED else "w-ß"
    written = _awkward(f"awkward-{state.name}", state, worker)
    await store.save(written)
    stored = await store.get_execution(written.execution_id)
    assert stored is not None
    assert execution_row(stored) == execution_row(written)


async def test_a_new_dispatched_row_comes_back_exactly_with_its_dispatch_logged(
    replica: PostgresStore, pg_url: str
) -> None:
    # Only a replica inserts the rows it dispatches at once (never pending).
    written = _awkward("awkward-dispatched", State.SCHEDULED, "w-ß")
    await replica.insert_dispatched(written)
    stored = await replica.get_execution(written.execution_id)
    assert stored is not None
    assert execution_row(stored) == execution_row(written)
    async with await psycopg.AsyncConnection.connect(pg_url) as db:
        cursor = await db.execute(
            "SELECT generation, worker, replica, at FROM dispatches WHERE execution_id = %s",
            (written.execution_id,),
        )
        assert await cursor.fetchall() == [(2**40, "w-ß", "test-replica", written.updated_at)]


async def test_a_batch_cut_into_several_texts_is_written_whole(
    replica: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows saved together pass the bound of one JSON text: upserted and inserted chunk by chunk.
    texts: list[int] = []

    def small_texts(rows: list[tuple[object, ...]]) -> list[str]:
        cut = rows_json(rows, most=3000)
        texts.append(len(cut))
        return cut

    monkeypatch.setattr(writer, "rows_json", small_texts)
    saved = [_awkward(f"saved-{i}", State.COMPLETED, "w-ß") for i in range(8)]
    await replica.save_many(saved)
    dispatched = [_awkward(f"dispatched-{i}", State.SCHEDULED, "w-ß") for i in range(8)]
    await asyncio.gather(*(replica.insert_dispatched(e) for e in dispatched))
    stored = await replica.get_executions([e.execution_id for e in saved + dispatched])
    assert {i: execution_row(e) for i, e in stored.items()} == {
        e.execution_id: execution_row(e) for e in saved + dispatched
    }
    assert len(texts) == 2 and min(texts) > 1  # each write was cut, none was lost


async def _heard_until(heard: list[notices.Notice], done: Callable[[], bool]) -> None:
    for _ in range(200):
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not announced: {heard}")


async def test_a_group_commit_announces_the_rows_it_applied_and_no_other(
    replica: PostgresStore, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch's transaction announces exactly the rows it applied, pending ones and finished ones,
    # never a row refused; notices that would not fit one NOTIFY are cut into several.
    announced: list[int] = []
    monkeypatch.setattr(
        writer, "announce", lambda db, rows: announced.append(len(rows)) or announce(db, rows)
    )
    heard: list[notices.Notice] = []
    replica.subscribe(heard.append)

    def pending() -> set[str]:
        return {ref.execution_id for n in heard if isinstance(n, notices.PendingAdded) for ref in n.refs}

    def finished() -> set[str]:
        return {i for n in heard if isinstance(n, notices.Finished) for i in n.execution_ids}

    held = _awkward("held-elsewhere", State.SCHEDULED, "w-ß")
    await replica.save(held)
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as db:
        await db.execute("UPDATE executions SET owner = 'r2' WHERE execution_id = %s", (held.execution_id,))
    announced.clear()
    outcomes = await asyncio.gather(
        replica.save(_awkward("new-pending", State.CREATED, "")),
        replica.save(_awkward("ended", State.COMPLETED, "w-ß")),
        replica.save(held.evolve(state=State.COMPLETED, output_json="1")),
        return_exceptions=True,
    )
    assert outcomes[:2] == [None, None] and isinstance(outcomes[2], Conflict)
    await _heard_until(heard, lambda: "new-pending" in pending() and "ended" in finished())
    [ref] = [r for n in heard if isinstance(n, notices.PendingAdded) for r in n.refs]
    assert ref == PendingRef.of(_awkward("new-pending", State.CREATED, ""))
    assert announced == [2]  # the refused row is not among those announced

    many = [_awkward(f"ended-{i:04d}-{'x' * 24}", State.FAILED, "w-ß") for i in range(300)]
    await replica.save_many(many)
    await _heard_until(heard, lambda: {e.execution_id for e in many} <= finished())
    assert announced == [2, 300]
    assert sum(isinstance(n, notices.Finished) for n in heard) >= 3  # 9,000 bytes of ids: cut
    assert "held-elsewhere" not in pending() | finished()


async def test_running_rows_commit_relaxed_and_the_next_commit_waits_for_the_flush(
    replica: PostgresStore,
) -> None:
    # RUNNING rows (claim marks) commit without waiting for the WAL flush, in a transaction that
    # relaxes only itself: the submissions and results after it are promises again.
    running = _awkward("running", State.RUNNING, "w-ß")
    await replica.save(running)
    stored = await replica.get_execution("running")
    assert stored is not None and execution_row(stored) == execution_row(running)
    connection = replica._writes._conn
    assert connection is not None
    cursor = await connection.execute("SHOW synchronous_commit")
    assert await cursor.fetchone() == ("on",)
