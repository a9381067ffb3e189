"""The pure parts of the PostgreSQL replica code: NOTIFY payloads, the worker directory, URLs."""

from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType

import pytest

from flux.dispatcher.modes.shared.worker_documents import info_of, load_of, view_of
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.domain.execution import Execution, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.matching import Shape, explain
from flux.store.base import PendingRef
from flux.store.notices import NOTIFY_LIMIT, chunks, parse_pending, pending_line
from flux.store.postgres import redacted
from flux.store.postgres.rows import COLUMN_TYPES, COLUMNS, FROM_JSON, owned_row, rows_json


def execution(execution_id: str, name: str = "train model", version: int = 3, seq: int = 17) -> Execution:
    return Execution(execution_id, WorkflowRef(name, version, "h" * 64, "train"), seq, "null", 3)


def test_pending_lines_round_trip_even_with_spaces_in_names() -> None:
    lines = [
        _pending_line_of(execution("a1", "train model", 3, 17)),
        _pending_line_of(execution("b2", "x", 1, 2)),
    ]
    assert parse_pending("\n".join(lines)) == [
        PendingRef("a1", 17, "train model", 3),
        PendingRef("b2", 2, "x", 1),
    ]


def test_pending_lines_carry_the_tenant_and_a_line_without_one_is_tenant_default() -> None:
    ml = dataclasses.replace(execution("c3", "train model"), tenant="ml")
    assert parse_pending(_pending_line_of(ml)) == [PendingRef("c3", 17, "train model", 3, "ml")]
    # As a replica from before tenants announces it.
    assert parse_pending("d4 5 2 train model") == [PendingRef("d4", 5, "train model", 2, "default")]


def test_payloads_stay_under_the_notify_limit_and_lose_nothing() -> None:
    lines = [_pending_line_of(execution(f"{i:032x}")) for i in range(2000)]
    payloads = list(chunks(lines))
    assert len(payloads) > 1
    assert all(len(p) <= NOTIFY_LIMIT for p in payloads)
    assert [line for p in payloads for line in p.splitlines()] == lines
    assert list(chunks([])) == []


def test_a_batch_of_rows_is_sent_as_one_json_array_of_rows_in_column_order() -> None:
    first, second = execution("a1"), execution("b2", seq=18).evolve(worker="w1")
    [text] = rows_json([owned_row(first, "r1"), owned_row(second, "r1")])
    sent = json.loads(text)
    names = [name.strip() for name in COLUMNS.split(",")]
    assert len(COLUMN_TYPES) == len(names) and all(len(row) == len(names) for row in sent)
    by_name = [dict(zip(names, row, strict=True)) for row in sent]
    assert [row["execution_id"] for row in by_name] == ["a1", "b2"] and by_name[1]["seq"] == 18
    assert [row["worker"] for row in by_name] == ["", "w1"] and by_name[0]["error"] is None
    # The statement reads each position as its column's type, in the same order.
    assert FROM_JSON.count("(r->>") == len(names)
    assert (
        f"(r->>0)::{COLUMN_TYPES[0]}" in FROM_JSON
        and f"(r->>{len(names) - 1})::{COLUMN_TYPES[-1]}" in FROM_JSON
    )
    assert rows_json([]) == ["[]"]


def test_a_batch_too_large_for_one_jsonb_value_is_cut_in_order_and_never_inside_a_row() -> None:
    rows = [owned_row(execution(f"e{i}").evolve(input_json="x" * (100 * i)), "r1") for i in range(12)]
    texts = rows_json(rows, most=1000)
    assert len(texts) > 1
    assert [tuple(row) for text in texts for row in json.loads(text)] == rows
    # Each text is within the bound unless a single row is longer than it.
    assert all(len(text) <= 1000 + 2 or len(json.loads(text)) == 1 for text in texts)
    assert rows_json(rows) == [json.dumps(rows)]  # an ordinary batch: one text


def test_a_row_that_json_cannot_carry_exactly_is_refused_before_it_is_sent() -> None:
    # NaN and infinities have no JSON spelling; PostgreSQL would refuse the whole batch's text.
    with pytest.raises(ValueError):
        rows_json([owned_row(execution("a1").evolve(run_time=float("nan")), "r1")])


def test_urls_are_redacted_for_logs() -> None:
    assert redacted("postgresql://flux:s3cret@db:5432/flux") == "postgresql://flux:***@db:5432/flux"
    assert redacted("postgresql://flux@db/flux") == "postgresql://flux@db/flux"
    assert redacted("postgresql://u:p:q@h/d") == "postgresql://u:***@h/d"


def test_the_directory_describes_a_worker_as_its_own_replica_sees_it() -> None:
    entry = WorkerEntry(
        name="gpu-1",
        session_token="t",
        labels=MappingProxyType({"zone": "a"}),
        capacity=8,
        resources=WorkerResources(
            8, 6, 16 << 30, 10 << 30, 100 << 30, 50 << 30, (Gpu(0, "u0", "A100", 80 << 30, 80 << 30),)
        ),
        software=WorkerSoftware({"torch": "2.5.1"}, {"python_version": "3.11"}),
    )
    entry.hold("e1", ResourceRequest(cpu=2, memory=1 << 30, gpu=1), (0,))
    view = view_of("gpu-1", {**info_of(entry), **load_of(entry)})
    local = entry.view()
    assert view == local
    # So explain gives the same verdict through any replica.
    shape = Shape(ResourceRequest(gpu=1, packages=("torch>=2",)), MappingProxyType({"zone": "a"}))
    assert explain(shape, [view]).summary == explain(shape, [local]).summary


def _pending_line_of(e: Execution) -> str:
    return pending_line(PendingRef(e.execution_id, e.seq, e.workflow.name, e.workflow.version, e.tenant))
