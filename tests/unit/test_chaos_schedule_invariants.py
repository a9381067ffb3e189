"""The chaos run's schedule invariant (bench/chaos/schedule_invariants.py) on crafted trails."""

from __future__ import annotations

from bench.chaos.schedule_invariants import SCHEDULE, check
from flux.domain.schedule import execution_id_for


def _run(tick: int, result: str = "fired") -> tuple[float, str, str]:
    return (float(tick), execution_id_for("default", SCHEDULE, tick), result)


def test_every_tick_once_and_stored_is_clean() -> None:
    runs = [_run(t) for t in range(100, 110)]
    assert check(runs, [r[1] for r in runs]) == []


def test_a_gap_a_skipped_tick_and_a_second_execution_are_each_found() -> None:
    runs = [_run(100), _run(101, "skipped"), _run(103)]
    stored = [runs[0][1], runs[0][1], runs[2][1]]
    kinds = sorted((v.kind, v.subject) for v in check(runs, stored))
    assert kinds == [
        ("schedule_skipped", f"{SCHEDULE}@101"),
        ("schedule_skipped", f"{SCHEDULE}@102"),
        ("schedule_twice", runs[0][1]),
    ]


def test_a_run_never_stored_or_under_another_id_is_found() -> None:
    runs = [_run(100), (101.0, "sch-other-101", "fired")]
    kinds = sorted(v.kind for v in check(runs, []))
    assert kinds == ["schedule_id", "schedule_not_stored"]
