"""The chaos run's invariants: each passes a clean trail and flags a crafted violation.

The test of the sampler's reading of the workers' markers starts a child for a dead pid, so it is
in tests/integration/test_chaos_invariants.py.
"""

from __future__ import annotations

import json

import pytest

from bench.chaos import invariants
from bench.chaos.invariants import (
    CANCELLED,
    COMPLETED,
    CREATED,
    FAILED,
    NEVER_FITS,
    RUNNING,
    SCHEDULED,
    AttemptSeen,
    Explained,
    Observations,
    Quotas,
    Record,
    Sample,
    TenantSample,
)


def _done(execution_id: str, worker: str = "w1", attempt: int = 1) -> Record:
    output = {"attempt": attempt, "worker": worker, "execution_id": execution_id}
    return Record(execution_id, COMPLETED, worker, attempt, json.dumps(output))


def _clean() -> Observations:
    """A trail where every invariant holds: finished work, one explained never-fits, a cancel."""
    return Observations(
        accepted={"a": "echo", "b": "fail", "c": "cancelled", "d": NEVER_FITS, "e": "sleep"},
        records={
            "a": _done("a"),
            "b": Record("b", FAILED, "w2", 1),
            "c": Record("c", CANCELLED, "w1", 1),
            "d": Record("d", CREATED),
            "e": _done("e", "w2", attempt=2),
        },
        explained={"d": Explained(True, "0/4 workers can run it: 4 have only 4 cores")},
        lifecycle=[
            {"event": "dispatched", "execution_id": "e", "generation": 1},
            {"event": "requeued", "execution_id": "e", "generation": 1},
            {"event": "dispatched", "execution_id": "e", "generation": 2},
            {"event": "completed", "execution_id": "e", "generation": 2},
            {"event": "dispatched", "execution_id": "a", "generation": 1},
            {"event": "completed", "execution_id": "a", "generation": 1},
        ],
        samples=[
            Sample(1.0, "w1", "server", 4, 4, 3, 4),
            Sample(1.0, "w1", "markers", 3, 4, 3, 4),
        ],
        cancelled={"c"},
        tenant_samples=[TenantSample(1.0, "server", {"alpha": 10, "beta": 2, "default": 9})],
        quotas=QUOTAS,
    )


QUOTAS = Quotas(caps={"alpha": 10, "beta": 12}, cohorts={"chaos": (("alpha", "beta"), 12)})


def test_a_clean_trail_has_no_violation() -> None:
    assert invariants.check(_clean()) == {
        "lost": [],
        "duplicates": [],
        "overcommit": [],
        "cancelled_completed": [],
        "drain": [],
        "quota": [],
        "attempts": [],
    }


@pytest.mark.parametrize(
    ("cpu", "subject", "detail"),
    [
        ({"alpha": 11}, "alpha", "database at t=2.0s: 11 cores, cap 10"),
        ({"alpha": 5, "beta": 8}, "cohort chaos", "database at t=2.0s: 13 cores, pool 12"),
    ],
    ids=["tenant-over-its-cap", "cohort-over-its-pool"],
)
def test_a_tenant_or_cohort_over_its_quota_is_a_quota_violation(cpu, subject, detail) -> None:
    observed = _clean()
    observed.tenant_samples.append(TenantSample(2.0, "database", cpu))
    assert [(v.kind, v.subject, v.detail) for v in invariants.check(observed)["quota"]] == [
        ("quota", subject, detail)
    ]


@pytest.mark.parametrize(
    ("record", "explanation", "detail"),
    [
        (None, None, "missing from the store"),
        (Record("x", RUNNING, "w1"), None, "still RUNNING on w1"),
        (Record("x", SCHEDULED, "w2"), None, "still SCHEDULED on w2"),
        (Record("x", CREATED), Explained(False, "1/4 workers can run it"), "still CREATED although it fits"),
    ],
    ids=["missing", "running", "scheduled", "created-but-fits"],
)
def test_lost_flags_an_accepted_id_that_is_not_final(record, explanation, detail) -> None:
    observed = _clean()
    observed.accepted["x"] = "echo"
    if record is not None:
        observed.records["x"] = record
    if explanation is not None:
        observed.explained["x"] = explanation
    found = invariants.check(observed)["lost"]
    assert [(v.kind, v.subject) for v in found] == [("lost", "x")]
    assert detail in found[0].detail


@pytest.mark.parametrize(
    "explanation", [None, Explained(False, "0/4 workers can run it: busy"), Explained(True, "")],
    ids=["unexplained", "not-infeasible", "no-summary"],
)  # fmt: skip
def test_a_pending_never_fits_must_be_explained_as_infeasible(explanation) -> None:
    observed = _clean()
    del observed.explained["d"]
    if explanation is not None:
        observed.explained["d"] = explanation
    assert [v.subject for v in invariants.check(observed)["lost"]] == ["d"]


def test_a_never_fits_execution_that_ran_is_overcommit() -> None:
    observed = _clean()
    observed.records["d"] = _done("d")
    assert [(v.kind, v.subject) for v in invariants.check(observed)["overcommit"]] == [("overcommit", "d")]


@pytest.mark.parametrize(
    "output",
    [
        {"attempt": 1, "worker": "w2", "execution_id": "e"},  # the record says attempt 2
        {"attempt": 2, "worker": "w1", "execution_id": "e"},  # the record says w2
        {"attempt": 2, "worker": "w2", "execution_id": "other"},
        "not a result",
    ],
    ids=["attempt", "worker", "execution", "shape"],
)
def test_a_completed_record_must_keep_its_own_runs_output(output) -> None:
    observed = _clean()
    observed.records["e"] = Record("e", COMPLETED, "w2", 2, json.dumps(output))
    found = invariants.check(observed)["duplicates"]
    assert [(v.kind, v.subject) for v in found] == [("result_mismatch", "e")]


def test_a_generation_dispatched_twice_is_a_duplicate() -> None:
    observed = _clean()
    observed.lifecycle.append({"event": "dispatched", "execution_id": "a", "generation": 1})
    found = invariants.check(observed)["duplicates"]
    assert [(v.kind, v.subject) for v in found] == [("duplicate", "a")]
    assert "generation 1 dispatched 2 times" in found[0].detail


def test_finishing_under_two_generations_is_a_duplicate() -> None:
    observed = _clean()
    observed.lifecycle.append({"event": "failed", "execution_id": "e", "generation": 1})
    found = invariants.check(observed)["duplicates"]
    assert [(v.kind, v.subject) for v in found] == [("duplicate", "e")]
    assert "finished under generations" in found[0].detail


@pytest.mark.parametrize(
    "sample",
    [
        Sample(2.0, "w1", "server", 5, 4, 2, 4),
        Sample(2.0, "w1", "server", 2, 4, 5, 4),
        Sample(2.0, "w2", "markers", 6, 4, 3, 4),
        Sample(2.0, "w2", "markers", 4, 4, 5, 4, ("a", "b", "c", "d", "e")),
    ],
    ids=["server-cpu", "server-count", "markers-cpu", "markers-count"],
)
def test_a_sample_over_cores_or_capacity_is_overcommit(sample: Sample) -> None:
    observed = _clean()
    observed.samples.append(sample)
    found = invariants.check(observed)["overcommit"]
    assert [(v.kind, v.subject) for v in found] == [("overcommit", sample.worker)]
    assert sample.source in found[0].detail
    # The markers name the bodies they counted, to follow each in the servers' lifecycle logs.
    assert all(execution_id in found[0].detail for execution_id in sample.ids)


@pytest.mark.parametrize(
    "record", [_done("c"), Record("c", FAILED, "w1"), Record("c", RUNNING, "w1"), None],
    ids=["completed", "failed", "running", "missing"],
)  # fmt: skip
def test_a_cancelled_execution_must_end_cancelled(record) -> None:
    observed = _clean()
    if record is None:
        del observed.records["c"]
    else:
        observed.records["c"] = record
    found = invariants.check(observed)["cancelled_completed"]
    assert [(v.kind, v.subject) for v in found] == [("cancelled_completed", "c")]


def test_work_left_at_the_drain_bound_is_a_drain_violation() -> None:
    observed = _clean()
    observed.undrained, observed.drain_bound_s = ["p", "q"], 120
    found = invariants.check(observed)["drain"]
    assert len(found) == 1 and found[0].detail.startswith("2 unfinished after 120s of drain: p, q")


def test_lifecycle_lines_are_read_from_json_logs_and_others_skipped() -> None:
    lines = [
        '{"ts": "t", "level": "INFO", "logger": "flux.lifecycle", "msg": "execution dispatched", '
        '"event": "dispatched", "execution_id": "a", "generation": 3}',
        '{"ts": "t", "level": "INFO", "logger": "flux.server", "msg": "listening"}',
        "flux listening on 127.0.0.1:1234 (grpc)",
        '{"truncated": ',
    ]
    assert invariants.parse_lifecycle(lines) == [
        {"ts": "t", "level": "INFO", "logger": "flux.lifecycle", "msg": "execution dispatched",
         "event": "dispatched", "execution_id": "a", "generation": 3}
    ]  # fmt: skip


def _tried(*attempts: tuple[int, float, float, str], state: int = COMPLETED, reason: str = "") -> Record:
    seen = tuple(AttemptSeen(n, f"w{n}", start, end, why) for n, start, end, why in attempts)
    return Record("x", state, "w1", max(a.attempt for a in seen), "", 3, reason, seen)


@pytest.mark.parametrize(
    ("record", "timed_out", "kind"),
    [
        pytest.param(
            _tried((1, 0, 1, "error"), (2, 2, 3, "completed")), False, None, id="retried then completed"
        ),
        pytest.param(
            _tried((1, 0, 1, "timeout"), (2, 1, 2, "timeout"), state=FAILED, reason="timeout"),
            True,
            None,
            id="timed out twice, back to back",
        ),
        pytest.param(
            _tried((1, 0, 1, "error"), (2, 1, 2, "error"), (3, 2, 3, "error"), (4, 3, 4, "completed")),
            False,
            "beyond_max_attempts",
            id="a fourth attempt of three",
        ),
        pytest.param(
            _tried((1, 0, 2, "worker_lost"), (2, 1, 3, "completed")),
            False,
            "overlapping_attempts",
            id="two attempts at once",
        ),
        pytest.param(
            _tried((1, 0, 1, "completed"), (2, 2, 3, "completed")),
            False,
            "retried_after_completed",
            id="a retry after a result",
        ),
        pytest.param(
            _tried((1, 0, 1, "completed"), state=FAILED, reason="error"),
            True,
            "timeout_not_fired",
            id="a body past its timeout completed",
        ),
        pytest.param(
            _tried((1, 0, 1, "heartbeat_timeout"), state=FAILED, reason="heartbeat_timeout"),
            True,
            "timeout_not_fired",
            id="another reason than timeout",
        ),
        pytest.param(
            _tried((1, 0, 1, "timeout"), (2, 2, 3, "worker_lost"), state=FAILED, reason="worker_lost"),
            True,
            None,
            id="timed out, then its worker was killed",
        ),
        pytest.param(
            _tried((1, 0, 1, "worker_lost"), state=FAILED, reason="worker_lost"),
            True,
            "timeout_not_fired",
            id="only ever lost: its timeout never fired",
        ),
    ],
)
def test_attempt_invariants_are_keyed_on_the_recorded_attempts(
    record: Record, timed_out: bool, kind: str | None
) -> None:
    observed = Observations(records={"x": record}, must_time_out={"x"} if timed_out else set())
    found = invariants.check(observed)["attempts"]
    assert [v.kind for v in found] == ([kind] if kind else []), found
