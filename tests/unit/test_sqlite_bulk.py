"""SQLite's bulk row writer (flux/store/sqlite_bulk.py) stores exactly what row-by-row binding does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from flux.dispatcher.transitions.submission import new_ids
from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef, copies
from flux.domain.gang import GangRun
from flux.domain.policy import default_policy
from flux.store import sqlite_bulk
from flux.store.rows import execution_row
from flux.store.sqlite_schema import SCHEMA, upsert

pytestmark = pytest.mark.timeout(10)

JOB = WorkflowRef("job", 2, "h" * 64, "job")


def database(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(SCHEMA)
    return db


def batch() -> list[Execution]:
    template = Execution(
        "", JOB, 0, "", 3, created_at=1.5, updated_at=1.5, batch_id="b-1", tenant="acme", trace="00-ab-cd-01",
        policy=default_policy(4), gang=GangRun(2), flow_keys=(("batch", "b-1"), ("batch_max", "4")),
    )  # fmt: skip
    inputs = [f'{{"i": {i}}}' for i in range(300)]
    inputs[7] = '{"name": "Zoë 🚀", "quote": "\\"x\\"", "nested": [1, {"a": null}]}'
    inputs[8] = "null"
    made = copies(
        template, ("execution_id", "seq", "input_json"), zip(new_ids(300), range(1, 301), inputs, strict=True)
    )
    made[100] = made[100].evolve(flow_keys=(("concurrency", "k"),))  # its own keys: still in the run
    made[150] = made[150].evolve(state=State.FAILED, error=ExecutionError("E", "boom", "tb"), reason="error")
    made[151] = made[151].evolve(flow_keys=())
    made[200] = made[200].evolve(error=ExecutionError("E", "only the error differs", ""))
    return made


def test_runs_of_alike_rows_are_stored_as_row_by_row_binding_stores_them(tmp_path: Path) -> None:
    rows = batch()
    bulk, single = database(tmp_path / "bulk.db"), database(tmp_path / "single.db")
    sqlite_bulk.upsert_executions(bulk, rows)
    upsert(single, [execution_row(e) for e in rows])
    query = "SELECT * FROM executions ORDER BY execution_id"
    assert bulk.execute(query).fetchall() == single.execute(query).fetchall()
    assert len(bulk.execute(query).fetchall()) == 300
    # A later write of the same rows updates them (a retried submission, a schedule's run stored again).
    later = [e.evolve(state=State.CANCELLED, updated_at=9.0) for e in rows]
    sqlite_bulk.upsert_executions(bulk, later)
    upsert(single, [execution_row(e) for e in later])
    assert bulk.execute(query).fetchall() == single.execute(query).fetchall()
    assert {r[0] for r in bulk.execute("SELECT DISTINCT state FROM executions")} == {int(State.CANCELLED)}


def test_a_batch_is_split_into_runs_and_short_runs_are_bound_row_by_row(monkeypatch) -> None:
    rows = batch()
    assert [len(run) for run in sqlite_bulk._runs(rows)] == [150, 1, 49, 1, 99]
    statements: list[str] = []

    class Recording:
        def execute(self, sql: str, params: object) -> None:
            statements.append("run" if sql == sqlite_bulk.RUN_UPSERT else "run, keys shared")

        def executemany(self, sql: str, params: list[object]) -> None:
            statements.append(f"rows {len(params)}")

    sqlite_bulk.write_rows(Recording(), rows, "upsert")  # type: ignore[arg-type]
    assert statements == ["run", "run, keys shared", "rows 51"]
    statements.clear()
    sqlite_bulk.write_rows(Recording(), rows[:60], "upsert")  # type: ignore[arg-type]
    assert statements == ["rows 60"]
