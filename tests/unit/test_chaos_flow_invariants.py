"""The chaos run's flow-control invariants (bench/chaos/flow_invariants.py) on crafted trails."""

from __future__ import annotations

import json

import pytest

from bench.chaos.flow_invariants import KeySample, RateTerms, over_batch_max, over_key_max, over_rate, starts
from bench.chaos.invariants import CANCELLED, COMPLETED, FAILED, AttemptSeen, Record


def sample(at: float, **held: int) -> KeySample:
    return KeySample(at, "store", {tuple(name.split("_")): n for name, n in held.items()})  # type: ignore[misc]


@pytest.mark.parametrize(
    ("samples", "kinds"),
    [
        pytest.param([sample(1.0, alpha_k1=2, alpha_k2=2), sample(1.5, alpha_k1=1)], [], id="at the max is fine"),
        pytest.param([sample(1.0, alpha_k1=3)], ["alpha/k1"], id="one over the max"),
        pytest.param([sample(1.0, alpha_k1=2, beta_k1=2)], [], id="each tenant's key is its own"),
        pytest.param([sample(1.0, alpha_k1=3), sample(2.0, alpha_k1=3, beta_k2=4)],
                     ["alpha/k1", "alpha/k1", "beta/k2"], id="every sample over is reported"),
        pytest.param([], [], id="nothing sampled"),
    ],
)  # fmt: skip
def test_no_key_above_its_max(samples: list[KeySample], kinds: list[str]) -> None:
    found = over_key_max(samples, most=2)
    assert [v.subject for v in found] == kinds
    assert all(v.kind == "flow_key" for v in found)


def test_no_batch_above_its_max_concurrent() -> None:
    fine = KeySample(1.0, "store", {("alpha", "b-1"): 2, ("beta", "b-2"): 2})
    over = KeySample(2.0, "store", {("alpha", "b-1"): 3, ("alpha", "b-3"): 1})
    assert over_batch_max([fine], most=2) == []
    [found] = over_batch_max([fine, over], most=2)
    assert (found.kind, found.subject) == ("flow_batch", "b-1") and "3 held, max_concurrent 2" in found.detail


# 2/s, burst 1, no lag: 2 * window + 2 starts in a window (a token per 0.5 s, one saved, one unplaced).
TERMS = RateTerms(rate=2.0, burst=1, lag_s=0.0)


@pytest.mark.parametrize(
    ("times", "windows", "violations"),
    [
        pytest.param([i * 0.5 for i in range(40)], (1.0, 5.0, 10.0), [], id="evenly at the rate"),
        pytest.param([0.0, 0.0, 0.01, 0.02] + [1 + i * 0.5 for i in range(10)], (1.0,), [],
                     id="the burst and the unplaced one on top"),
        pytest.param([0.0, 0.1, 0.2, 0.3, 0.4], (1.0,), ["5 starts in the 1s from 0.000"],
                     id="five in one second"),
        pytest.param([i * 0.4 for i in range(30)], (1.0,), [], id="a little fast: hidden in the slack of a second"),
        pytest.param([i * 0.4 for i in range(30)], (1.0, 10.0), ["25 starts in the 10s from 0.000"],
                     id="a little fast: a long window shows it"),
        pytest.param([5.0, 0.0, 0.1, 0.2, 0.3, 0.4], (1.0,), ["5 starts in the 1s from 0.000"],
                     id="out of order"),
    ],
)  # fmt: skip
def test_no_rate_exceeded_over_any_window(
    times: list[float], windows: tuple[float, ...], violations: list[str]
) -> None:
    found = over_rate({"alpha": times}, TERMS, windows)
    assert [v.detail.split(";")[0] for v in found] == violations
    assert all(v.kind == "flow_rate" and v.subject == "alpha" for v in found)


def test_the_lag_widens_the_bound_by_the_tokens_it_covers() -> None:
    assert RateTerms(rate=2.0, burst=1, lag_s=3.0).most(1.0) == 2 * 4 + 2
    # A dispatch claimed late (up to the ack deadline) bunches with later ones: not a violation.
    bunched = [3.0] * 7 + [3.5, 4.0]
    assert over_rate({"alpha": bunched}, RateTerms(rate=2.0, burst=1, lag_s=3.0), (1.0,)) == []
    assert over_rate({"alpha": bunched}, TERMS, (1.0,)) != []


def test_starts_count_every_attempt_that_started_per_tenant() -> None:
    def done(started: float) -> str:
        return json.dumps({"attempt": 1, "worker": "w1", "execution_id": "x", "started": started})

    records = {
        "a": Record(
            "a",
            COMPLETED,
            attempts=(
                AttemptSeen(1, "w1", 1.0, 1.5, "worker_lost"),
                AttemptSeen(2, "w2", 3.0, 3.1, "completed"),
            ),
        ),
        "b": Record("b", COMPLETED, output_json=done(2.0)),  # a first try: only the body says when
        "c": Record("c", FAILED, attempts=(AttemptSeen(1, "w1", 0.0, 0.0, "worker_lost"),)),  # never started
        "d": Record("d", COMPLETED, output_json=done(0.5)),
        "e": Record("e", CANCELLED),  # cancelled before it started
    }
    assert starts(records, {"a": "alpha", "b": "beta", "c": "alpha"}) == {
        "alpha": [1.0, 3.0], "beta": [2.0], "default": [0.5],
    }  # fmt: skip
