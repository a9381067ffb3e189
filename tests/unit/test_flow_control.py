"""Flow control's pure core (flux/matching/flow.py): table-driven cases and hypothesis properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux.matching.flow import FlowControl, Gate


def conc(key: str, most: int) -> Gate:
    return Gate(f"c/{key}", f"key customer={key}", max=most, limit="wf")


def rate(per_second: float, burst: int = 1, key: str = "") -> Gate:
    return Gate(f"r/{key}", "rate limit wf", rate=per_second, burst=burst, limit="wf")


@pytest.mark.parametrize(
    ("most", "submitted", "admitted"),
    [(1, 1, 1), (1, 2, 1), (5, 5, 5), (5, 6, 5), (3, 0, 0)],
    ids=["one of one", "second waits", "exact fit", "one over", "nothing"],
)
def test_at_most_max_admitted(most: int, submitted: int, admitted: int) -> None:
    flow = FlowControl()
    took = [flow.admit(f"e{i}", (conc("acme", most),), "acme", 0, 0.0) for i in range(submitted)]
    assert sum(took) == admitted
    assert len(flow) == submitted - admitted


def test_a_freed_slot_admits_the_next_of_the_key() -> None:
    flow = FlowControl()
    assert flow.admit("a1", (conc("acme", 1),), "acme", 0, 0.0)
    assert not flow.admit("a2", (conc("acme", 1),), "acme", 0, 0.0)
    assert flow.blocked("a2", 0.0).describe() == "key customer=acme at 1/1 running"  # type: ignore[union-attr]
    assert flow.release("a1", 0.0) == ["a2"]
    assert flow.release("a2", 0.0) == []
    assert not list(flow.usage())  # an idle key costs nothing


def test_keys_are_independent() -> None:
    flow = FlowControl()
    assert flow.admit("a1", (conc("acme", 1),), "acme", 0, 0.0)
    assert flow.admit("b1", (conc("beta", 1),), "beta", 0, 0.0)


def test_keys_take_turns_on_a_shared_budget() -> None:
    # One budget for the workflow, keyed runs: the small key is not starved by the big one.
    flow = FlowControl()
    shared = Gate("c/all", "workflow wf", max=2)
    order = [f"big{i}" for i in range(100)] + ["small0", "small1", "small2"]
    admitted = [e for e in order if flow.admit(e, (shared,), e.rstrip("0123456789"), 0, 0.0)]
    assert admitted == ["big0", "big1"]
    started = []
    for _ in range(6):
        running = admitted.pop(0)
        admitted += flow.release(running, 0.0)
        started += admitted[-1:]
    assert {"small0", "small1", "small2"} <= set(started)


def test_priority_first_then_turns() -> None:
    flow = FlowControl()
    shared = Gate("c/all", "workflow wf", max=1)
    assert flow.admit("run", (shared,), "a", 0, 0.0)
    flow.admit("low", (shared,), "a", 0, 0.0)
    flow.admit("high", (shared,), "b", 5, 0.0)
    assert flow.release("run", 0.0) == ["high"]
    assert flow.release("high", 0.0) == ["low"]


def test_a_cancelled_waiter_is_skipped() -> None:
    flow = FlowControl()
    g = conc("acme", 1)
    flow.admit("a1", (g,), "acme", 0, 0.0)
    flow.admit("a2", (g,), "acme", 0, 0.0)
    flow.admit("a3", (g,), "acme", 0, 0.0)
    flow.release("a2", 0.0)
    assert flow.release("a1", 0.0) == ["a3"]


def test_rate_tokens_refill_continuously() -> None:
    flow = FlowControl()
    g = rate(2.0)  # one token every 0.5 s, none saved beyond one
    assert flow.admit("e1", (g,), "", 0, 0.0)
    flow.placed("e1", 0.0)
    assert not flow.admit("e2", (g,), "", 0, 0.1)
    blocked = flow.blocked("e2", 0.1)
    assert blocked is not None and blocked.describe() == "rate limit wf: next token in 0.4 s"
    assert flow.wakeups == {"r/": pytest.approx(0.5)}
    assert flow.refill("r/", 0.3) == []
    assert flow.refill("r/", 0.5) == ["e2"]
    assert flow.rate_limited == {"wf": 1}


def test_a_refund_gives_back_the_token_a_refused_start_took() -> None:
    # A replica placed e1 but the cluster's shared bucket refused its claim: nothing started, so
    # its next try (e1 again, read back) must not wait on this replica's own bucket too.
    flow = FlowControl()
    g = rate(2.0)
    assert flow.admit("e1", (g,), "", 0, 0.0)
    flow.placed("e1", 0.0)
    flow.refund("e1", 0.1)
    flow.release("e1", 0.1)
    assert flow.admit("e1", (g,), "", 0, 0.2)
    # Never above the burst, whatever is refunded.
    flow.placed("e1", 0.2)
    flow.refund("e1", 5.0)
    flow.refund("e1", 5.0)
    flow.release("e1", 5.0)
    assert flow.admit("e2", (g,), "", 0, 5.0)
    flow.placed("e2", 5.0)
    assert not flow.admit("e3", (g,), "", 0, 5.0)


def test_rate_keeps_at_most_burst_unplaced() -> None:
    flow = FlowControl()
    g = rate(1000.0, burst=2)
    assert flow.admit("e1", (g,), "", 0, 0.0)
    assert flow.admit("e2", (g,), "", 0, 0.0)
    assert not flow.admit("e3", (g,), "", 0, 10.0)  # tokens, but two already wait for a worker
    assert flow.placed("e1", 10.0) == ["e3"]


def test_concurrency_and_rate_together() -> None:
    flow = FlowControl()
    gates = (conc("acme", 1), rate(1.0, key="acme"))
    assert flow.admit("e1", gates, "acme", 0, 0.0)
    flow.placed("e1", 0.0)
    assert not flow.admit("e2", gates, "acme", 0, 0.0)  # waits on the slot
    assert flow.release("e1", 0.5) == []  # slot free, but no token yet: now waits on the rate
    assert flow.refill("r/acme", 1.0) == ["e2"]


# ---- properties ---------------------------------------------------------------------------------

ops = st.lists(
    st.tuples(st.sampled_from(["submit", "finish", "place"]), st.integers(0, 4), st.integers(0, 2)),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(1, 3))
def test_never_above_a_keys_max_and_nothing_lost(steps, most: int) -> None:
    flow = FlowControl()
    running: dict[str, str] = {}  # admitted id -> key
    waiting: dict[str, str] = {}
    n = 0
    for op, key_index, priority in steps:
        key = f"k{key_index}"
        if op == "submit":
            n += 1
            eid = f"e{n}"
            if flow.admit(eid, (conc(key, most),), key, priority, 0.0):
                running[eid] = key
            else:
                waiting[eid] = key
        elif op == "finish" and running:
            eid = sorted(running)[key_index % len(running)]
            del running[eid]
            for admitted in flow.release(eid, 0.0):
                running[admitted] = waiting.pop(admitted)
        for k in {f"k{i}" for i in range(5)}:
            assert sum(1 for v in running.values() if v == k) <= most
            # Work waits only while its key is full.
            if any(v == k for v in waiting.values()):
                assert sum(1 for v in running.values() if v == k) == most
    assert len(flow) == len(waiting)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(2, 40), st.integers(1, 10))
def test_fair_across_keys(most: int, big: int, small: int) -> None:
    # Two keys on one budget: the small key's runs all start within 2 x (its count + max) slots freed.
    flow = FlowControl()
    shared = Gate("c/all", "workflow wf", max=most)
    running = []
    for i in range(big):
        if flow.admit(f"big{i}", (shared,), "big", 0, 0.0):
            running.append(f"big{i}")
    for i in range(small):
        if flow.admit(f"small{i}", (shared,), "small", 0, 0.0):
            running.append(f"small{i}")
    started_small = sum(1 for e in running if e.startswith("small"))
    freed = 0
    while started_small < small:
        done = running.pop(0)
        freed += 1
        admitted = flow.release(done, 0.0)
        running += admitted
        started_small += sum(1 for e in admitted if e.startswith("small"))
    assert freed <= 2 * small


@settings(max_examples=100, deadline=None)
@given(st.floats(0.5, 50.0), st.integers(1, 5), st.lists(st.floats(0.0, 0.3), min_size=1, max_size=60))
def test_rate_never_exceeded_over_any_window(per_second: float, burst: int, gaps) -> None:
    # Admissions (placed at once) over any window of length T are at most burst + rate x T.
    flow = FlowControl()
    g = rate(per_second, burst)
    now, starts = 0.0, []
    for n, gap in enumerate(gaps):
        now += gap
        if flow.admit(f"e{n}", (g,), "", 0, now):
            starts.append(now)
            flow.placed(f"e{n}", now)
        due = flow.wakeups.get("r/")
        if due is not None and due <= now:
            for eid in flow.refill("r/", now):
                starts.append(now)
                flow.placed(eid, now)
    for i, start in enumerate(starts):
        for j in range(i, len(starts)):
            window = starts[j] - start
            assert j - i + 1 <= burst + per_second * window + 1e-6


def test_metrics_per_limit_never_per_key() -> None:
    from flux.observe.status import limit_totals
    from flux.v1 import control_pb2
    from gateway.observe.metrics import render

    flow = FlowControl()
    for key in ("a", "b"):
        flow.admit(f"{key}1", (conc(key, 1),), key, 0, 0.0)
        flow.admit(f"{key}2", (conc(key, 1),), key, 0, 0.0)
    flow.admit("r1", (rate(1.0),), "", 0, 0.0)
    flow.admit("r2", (rate(1.0),), "", 0, 0.0)
    assert limit_totals(flow) == (("wf", 3, 3, 1),)
    status = control_pb2.ClusterStatus(
        limits=[control_pb2.LimitStatus(limit="wf", in_use=3, waiting=3, rate_limited=1)]
    )
    text = render(status).decode()
    assert 'flux_limit_in_use{limit="wf"} 3.0' in text
    assert 'flux_limit_waiting{limit="wf"} 3.0' in text
    assert 'flux_rate_limited_total{limit="wf"} 1.0' in text
