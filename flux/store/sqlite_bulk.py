"""Writing a batch of execution rows to SQLite with most of the work in SQLite's C, not Python's.

A bulk submission's members share every column but four: their id, sequence number, input and
flow keys. Bound row by row (``executemany``), each row costs 33 parameters bound under the GIL;
here a run of alike rows is one statement: the shared columns bound once, the four that differ
as one JSON array that SQLite reads itself (``json_each``), the whole insert running with the
GIL released. About half the time of ``executemany`` for 10,000 members, and the event loop
runs meanwhile. Rows that are not part of a long enough run go through ``executemany``, as
before; all of them in the one transaction the caller holds.
"""

from __future__ import annotations

import json
import operator
import sqlite3
from collections.abc import Iterator

from flux.domain.execution import Execution
from flux.store.rows import EXECUTION_COLUMNS, EXECUTION_UPDATES, _flow_keys_json, execution_row
from flux.store.sqlite_schema import _UPSERT, transaction

# Every column but the four a bulk call's members each have their own (see ``_VARYING``).
_SHARED = operator.attrgetter(
    "workflow", "state", "worker", "attempt", "generation", "max_attempts", "output_json", "error",
    "gpu_indices", "created_at", "updated_at", "priority", "trace", "tenant", "policy", "not_before",
    "reason", "attempts", "heartbeat", "started_at", "run_time", "batch_id", "after", "when", "waiting",
    "gang",
)  # fmt: skip
_COLUMNS = [c.strip() for c in EXECUTION_COLUMNS.split(",")]
# Column position -> its place in each member's JSON array.
_VARYING = {
    _COLUMNS.index("execution_id"): 0,
    _COLUMNS.index("seq"): 1,
    _COLUMNS.index("input_json"): 2,
    _COLUMNS.index("flow_keys"): 3,
}


def _run_upsert(varying: dict[int, int]) -> str:
    select = ", ".join(
        f"json_extract(value, '$[{varying[p]}]')" if p in varying else "?" for p in range(len(_COLUMNS))
    )
    # ``WHERE true``: SQLite's parser needs it between a SELECT and ON CONFLICT.
    return f"""
INSERT INTO executions ({EXECUTION_COLUMNS}) SELECT {select} FROM json_each(?) WHERE true
ON CONFLICT (execution_id) DO UPDATE SET
    {", ".join(f"{c.strip()}=excluded.{c.strip()}" for c in EXECUTION_UPDATES.split(","))}
"""


RUN_UPSERT = _run_upsert(_VARYING)
# A run whose members share their flow keys too (a batch's, or none): those bound once as well.
_FLOW_KEYS = _COLUMNS.index("flow_keys")
_SAME_KEYS = {p: i for p, i in _VARYING.items() if p != _FLOW_KEYS}
RUN_UPSERT_SAME_KEYS = _run_upsert(_SAME_KEYS)
_EACH_SAME_KEYS = operator.attrgetter("execution_id", "seq", "input_json")

# Shorter runs are bound row by row: one statement per run would not pay for itself.
SHORTEST_RUN = 64


def upsert_executions(db: sqlite3.Connection, batch: list[Execution]) -> None:
    """Write ``batch`` (one row per execution) in one transaction."""
    with transaction(db, "BEGIN"):
        write_rows(db, batch, _UPSERT)


def write_rows(db: sqlite3.Connection, batch: list[Execution], upsert: str) -> None:
    """Write ``batch`` (one row per execution) inside the caller's transaction; ``upsert`` is the
    row-by-row statement."""
    singles: list[tuple[object, ...]] = []
    for run in _runs(batch):
        if len(run) < SHORTEST_RUN:
            singles.extend(execution_row(e) for e in run)
            continue
        first = execution_row(run[0])
        keys = run[0].flow_keys
        if all(e.flow_keys is keys for e in run):
            shared = [value for position, value in enumerate(first) if position not in _SAME_KEYS]
            db.execute(RUN_UPSERT_SAME_KEYS, (*shared, json.dumps(list(map(_EACH_SAME_KEYS, run)))))
            continue
        shared = [value for position, value in enumerate(first) if position not in _VARYING]
        members = json.dumps(
            [
                [e.execution_id, e.seq, e.input_json, _flow_keys_json(e.flow_keys) if e.flow_keys else ""]
                for e in run
            ]
        )
        db.execute(RUN_UPSERT, (*shared, members))
    if singles:
        db.executemany(upsert, singles)


def _runs(batch: list[Execution]) -> Iterator[list[Execution]]:
    """``batch`` as runs of consecutive rows alike in every shared column."""
    run: list[Execution] = []
    alike: tuple[object, ...] | None = None
    for execution in batch:
        shared = _SHARED(execution)
        if shared != alike:
            if run:
                yield run
            run, alike = [], shared
        run.append(execution)
    if run:
        yield run
