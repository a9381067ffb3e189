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
from flux.store import FlowRow

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
