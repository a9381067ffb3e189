"""The claim's flow guard on replicas (modes/shared/flow_guard.py): a key's concurrency counted
over every replica's held rows, the claim's own rows taken in order, named limits read live."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from flux.dispatcher.modes.shared.flow_guard import ClusterFlow
from flux.domain.limits import Concurrency, RateLimit, flow_of
from flux.domain.named_limits import NamedLimit
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.store import Bucket, FlowRow

RECORDS = {
    ("per_customer", 1): WorkflowRecord(
        "per_customer", 1, "", "main", ResourceRequest(), {}, 3, flow=flow_of(Concurrency(2, key="customer"))
    ),
    ("paced", 1): WorkflowRecord(
        "paced", 1, "", "main", ResourceRequest(), {}, 3, flow=flow_of(rate_limit=RateLimit("5/s"))
    ),
    ("summarise", 1): WorkflowRecord(
        "summarise", 1, "", "main", ResourceRequest(), {}, 3, flow=flow_of(limits=["openai"])
    ),
}
LIMITS = {("default", "openai"): NamedLimit("openai", concurrency=1)}


def guard() -> ClusterFlow:
    d = SimpleNamespace(
        catalogue=SimpleNamespace(get=lambda name, version: RECORDS.get((name, version))),
        flow=SimpleNamespace(named=lambda tenant, name: LIMITS.get((tenant, name))),
    )
    flow = ClusterFlow()
    flow.attach(d)  # type: ignore[arg-type]
    return flow


def row(
    execution_id: str, workflow: str, key: str = "", tenant: str = "default", version: int = 1
) -> FlowRow:
    part = {"per_customer": "concurrency", "paced": "rate_limit", "summarise": "limits"}[workflow]
    return FlowRow(execution_id, tenant, workflow, version, ((part, key),))


CASES = [
    pytest.param([], [row("a", "per_customer", "k"), row("b", "per_customer", "k"), row("c", "per_customer", "k")],
                 {"c"}, id="the claim's own rows count in order"),
    pytest.param([row("x", "per_customer", "k"), row("y", "per_customer", "k")], [row("a", "per_customer", "k")],
                 {"a"}, id="full on the other replicas' workers"),
    pytest.param([row("x", "per_customer", "k"), row("y", "per_customer", "k")], [row("a", "per_customer", "j")],
                 set(), id="another key has room"),
    pytest.param([row("x", "per_customer", "k")], [row("a", "per_customer", "k", tenant="other")],
                 set(), id="another tenant's key is its own"),
    pytest.param([row("x", "paced")] * 9, [row("a", "paced")], set(), id="a rate is not counted here"),
    pytest.param([row("x", "summarise")], [row("a", "summarise")], {"a"}, id="a named limit counts"),
    pytest.param([row("x", "summarise", version=7)], [row("a", "summarise")],
                 set(), id="a version not known here limits nothing"),
]  # fmt: skip


@pytest.mark.parametrize(("held", "wanted", "refused"), CASES)
def test_the_guard_refuses_what_would_pass_a_key_max(
    held: list[FlowRow], wanted: list[FlowRow], refused: set[str]
) -> None:
    flow = guard()
    assert flow(held, wanted) == refused
    assert flow.refused == refused
    assert flow.waiting is bool(refused)  # a slot freed anywhere should read the pending rows again


def test_in_use_counts_each_budget_over_the_cluster() -> None:
    held = [row("x", "per_customer", "k"), row("y", "per_customer", "k"), row("z", "summarise")]
    assert guard().in_use(held) == {"c/default/per_customer/k": 2, "lc/default/openai/": 1}


async def test_a_reload_applies_only_what_another_replica_changed() -> None:
    from flux.dispatcher.state.named_limits import LimitBook

    rows = [("default", "openai", '{"concurrency": 1}'), ("default", "mail", '{"concurrency": 3}')]

    async def list_limits() -> list[tuple[str, str, str]]:
        return list(rows)

    changed: list[tuple[str, str]] = []
    book = LimitBook(SimpleNamespace(list_limits=list_limits), lambda t, n: changed.append((t, n)))  # type: ignore[arg-type]
    await book.load()
    rows[:] = [("default", "openai", '{"concurrency": 2}'), ("default", "crm", '{"concurrency": 1}')]
    await book.reload()
    assert changed == [("default", "crm"), ("default", "mail"), ("default", "openai")]
    assert book.find("default", "openai") == NamedLimit("openai", concurrency=2)
    assert book.find("default", "mail") is None


# paced is RateLimit("5/s"), burst 1: a token every 0.2 s, at most one saved up.
RATE = "r/default/paced/"


@pytest.mark.parametrize(
    ("stored", "now", "wanted", "refused", "left", "due"),
    [
        pytest.param(None, 10.0, ["a"], set(), 0.0, None, id="no row yet: a full bucket"),
        pytest.param(None, 10.0, ["a", "b"], {"b"}, 0.0, 0.2, id="the claim's own rows take tokens in order"),
        pytest.param(Bucket(0.0, 10.0), 10.1, ["a"], {"a"}, 0.5, 0.1, id="half a token is none: due in 0.1 s"),
        pytest.param(Bucket(0.0, 10.0), 10.2, ["a"], set(), 0.0, None, id="refilled from updated_at"),
        pytest.param(Bucket(0.0, 0.0), 99.0, ["a", "b"], {"b"}, 0.0, 0.2, id="never more than the burst saved"),
    ],
)  # fmt: skip
def test_the_guard_takes_a_token_of_the_shared_bucket_per_row(
    stored: Bucket | None, now: float, wanted: list[str], refused: set[str], left: float, due: float | None
) -> None:
    flow = guard()
    rows = [row(i, "paced") for i in wanted]
    assert flow.rates(rows) == {RATE}
    buckets = {} if stored is None else {RATE: stored}
    assert flow([], rows, buckets, now) == refused
    assert buckets[RATE].tokens == pytest.approx(left)
    assert buckets[RATE].updated_at == now  # written back by the store as refilled to now
    assert flow.due.get(RATE) == (None if due is None else pytest.approx(due))


def test_a_row_refused_for_its_key_takes_no_token() -> None:
    flow = guard()
    RECORDS[("both", 1)] = WorkflowRecord(
        "both", 1, "", "main", ResourceRequest(), {}, 3,
        flow=flow_of(Concurrency(1, key="customer"), rate_limit=RateLimit("1/s")),
    )  # fmt: skip
    try:
        held = [FlowRow("x", "default", "both", 1, (("concurrency", "k"), ("rate_limit", "")))]
        wanted = [FlowRow("a", "default", "both", 1, (("concurrency", "k"), ("rate_limit", "")))]
        buckets: dict[str, Bucket] = {}
        assert flow(held, wanted, buckets, 5.0) == {"a"}
        assert buckets["r/default/both/"].tokens == 1.0
        assert flow.due == {}  # a freed slot brings it back, not a token
    finally:
        del RECORDS[("both", 1)]


def test_a_dry_shared_bucket_arms_one_timer_and_its_firing_rereads_the_rows() -> None:
    from flux.dispatcher.modes.shared.binder import SharedBinder
    from flux.dispatcher.state.deadlines import SHARED_BUCKET, Kind, Timers
    from flux.dispatcher.state.flow import FlowUsage

    now = [100.0]
    binder = SharedBinder(SimpleNamespace(), SimpleNamespace())  # type: ignore[arg-type]
    binder.d = SimpleNamespace(clock=lambda: now[0], timers=Timers(lambda: now[0]))  # type: ignore[assignment]
    timers = binder.d.timers
    for _ in range(3):  # three claims refused before the token is due: one timer
        binder.flow.due[RATE] = 0.2
        binder._arm_shared_buckets()
    assert len(timers) == 1 and timers.next_due() == pytest.approx(100.2)
    assert list(timers.due(100.2)) == [(Kind.FLOW, RATE, SHARED_BUCKET)]
    now[0] = 100.2
    binder.flow.due[RATE] = 0.2  # refused again once it fired: armed again
    binder._arm_shared_buckets()
    assert timers.next_due() == pytest.approx(100.4)

    reread: list[str] = []
    usage = FlowUsage(SimpleNamespace(), lambda: now[0])
    usage.shared_token = lambda: reread.append("pending rows")
    assert usage.refill(RATE, SHARED_BUCKET) is False  # nothing admitted here: the feed rereads
    assert reread == ["pending rows"]
