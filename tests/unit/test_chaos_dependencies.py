"""The chaos run's dependency invariant (bench/chaos/dependency_invariants.py) on crafted trails."""

from __future__ import annotations

import json

import pytest

from bench.chaos.dependency_invariants import check
from bench.chaos.invariants import CANCELLED, COMPLETED, CREATED, FAILED, AttemptSeen, Record


def _done(execution_id: str, ended: float, state: int = COMPLETED) -> Record:
    return Record(execution_id, state, updated_at=ended)


def _ran(execution_id: str, started: float, earlier: float | None = None) -> Record:
    attempts = (AttemptSeen(1, "w", earlier, earlier + 0.1, "worker_lost"),) if earlier else ()
    return Record(execution_id, COMPLETED, output_json=json.dumps({"started": started}), attempts=attempts)


@pytest.mark.parametrize(
    ("records", "kinds"),
    [
        ({"a": _done("a", 10.0), "b": _ran("b", 10.01)}, 0),
        ({"a": _done("a", 10.0), "b": _ran("b", 9.5)}, 1),
        ({"a": _done("a", 10.0), "b": _ran("b", 10.5, earlier=9.0)}, 1),
        ({"a": _done("a", 10.0, FAILED), "b": _ran("b", 10.5)}, 1),
        ({"a": _done("a", 10.0, FAILED), "b": Record("b", CANCELLED, reason="dependency")}, 0),
        ({"a": _done("a", 10.0, CANCELLED), "b": Record("b", CANCELLED, reason="")}, 1),
        ({"a": Record("a", CREATED), "b": Record("b", CREATED)}, 0),
    ],
    ids=[
        "after",
        "before",
        "an earlier attempt before",
        "ran after a failure",
        "cancelled for it",
        "cancelled for another reason",
        "both waiting",
    ],
)
def test_a_dependent_never_starts_before_its_dependency_completed(records, kinds):
    assert len(check({"b": ("a",)}, records)) == kinds
