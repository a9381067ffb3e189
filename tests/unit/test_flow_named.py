"""Named limits through the dispatcher: shared across workflows, per tenant, per key, changed live."""

from __future__ import annotations

import pytest

from flux.domain.execution import State
from flux.domain.limits import Concurrency, Flow, flow_of
from flux.domain.named_limits import NamedLimit
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.errors import AlreadyExists, InvalidArgument, NotFound
from tests.unit.harness import settled

pytestmark = pytest.mark.timeout(10)


async def limited(flux, name: str, flow: Flow) -> WorkflowRecord:
    declared = WorkflowRecord(name, 0, "", "main", ResourceRequest(), {}, 3, flow=flow)
    [record] = await flux.d.register_workflows(f"{name}.py", f"# {name}\n", [declared])
    return record


def _key(key: str):
    from flux.dispatcher.transitions.submission import Overrides

    return Overrides(key=key)


async def test_a_named_limit_is_shared_across_workflows(flux):
    await flux.d.limits.create("default", NamedLimit("openai", concurrency=2))
    await limited(flux, "summarise", flow_of(limits=["openai"]))
    await limited(flux, "translate", flow_of(limits=["openai"]))
    w = await flux.worker(capacity=8)
    a = [await flux.run("summarise") for _ in range(2)]
    b = await flux.run("translate")
    assert set(w.scheduled()) == set(a)
    assert flux.state(b) is State.CREATED
    why = await flux.d.why(b)
    assert "limit openai at 2/2 running" in why.summary
    w.claim(a[0])
    await w.complete(a[0])
    assert b in w.scheduled()


async def test_a_missing_limit_limits_nothing_until_created(flux):
    await limited(flux, "summarise", flow_of(limits=["openai"]))
    w = await flux.worker(capacity=8)
    first = [await flux.run("summarise") for _ in range(2)]
    assert set(w.scheduled()) == set(first)
    await flux.d.limits.create("default", NamedLimit("openai", concurrency=1))
    later = [await flux.run("summarise") for _ in range(2)]
    # The two admitted before it existed hold none of its slots: the first after it takes the one.
    assert w.scheduled() == later[:1]


async def test_per_key_limits_each_key_apart(flux):
    await flux.d.limits.create("default", NamedLimit("crm", concurrency=1, per_key=True))
    await limited(flux, "sync", flow_of(Concurrency(10, key="customer"), limits=["crm"]))
    w = await flux.worker(capacity=8)
    acme = [await flux.run("sync", '{"customer": "acme"}') for _ in range(2)]
    beta = await flux.run("sync", '{"customer": "beta"}')
    keyed = await flux.d.submit("sync", '{"customer": "acme"}', overrides=_key("gamma"))
    assert set(w.scheduled()) == {acme[0], beta, keyed.execution_id}
    assert flux.d.flow.limit_usage("default", "crm")[0] == ("acme", 1, 1)


async def test_raising_a_limit_lets_waiting_work_in_at_once(flux):
    await flux.d.limits.create("default", NamedLimit("openai", concurrency=1))
    await limited(flux, "summarise", flow_of(limits=["openai"]))
    w = await flux.worker(capacity=8)
    runs = [await flux.run("summarise") for _ in range(4)]
    assert w.scheduled() == runs[:1]
    await flux.d.limits.update("default", "openai", {"concurrency": 3})
    await settled()
    assert w.scheduled() == runs[1:3]
    await flux.d.limits.delete("default", "openai")
    await settled()
    assert w.scheduled() == runs[3:]


async def test_creating_a_limit_holds_back_work_already_waiting_on_another(flux):
    await limited(flux, "one", flow_of(Concurrency(1), limits=["openai"]))
    w = await flux.worker(capacity=8)
    runs = [await flux.run("one") for _ in range(3)]
    assert w.scheduled() == runs[:1]
    await flux.d.limits.create("default", NamedLimit("openai", concurrency=1))
    w.claim(runs[0])
    await w.complete(runs[0])
    # runs[0] held no openai slot (admitted before it existed); runs[1] takes the only one.
    assert w.scheduled() == [runs[1]]
    w.claim(runs[1])
    await w.complete(runs[1])
    assert w.scheduled() == [runs[2]]


async def test_limits_belong_to_their_tenant(flux):
    await flux.d.limits.create("acme", NamedLimit("openai", concurrency=1))
    assert flux.d.limits.find("default", "openai") is None
    assert [lim.name for lim in flux.d.limits.list("acme")] == ["openai"]
    with pytest.raises(AlreadyExists):
        await flux.d.limits.create("acme", NamedLimit("openai", rate="1/s"))
    with pytest.raises(NotFound):
        await flux.d.limits.delete("default", "openai")
    with pytest.raises(InvalidArgument, match="more than once"):
        await flux.d.limits.apply("acme", [NamedLimit("a", 1), NamedLimit("a", 2)])
    assert flux.store.limits[("acme", "openai")]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        pytest.param({}, "limits nothing", id="no terms"),
        pytest.param({"burst": 3, "concurrency": 1}, "burst needs a rate", id="burst without rate"),
        pytest.param({"rate": "fast"}, "rate must be", id="bad rate"),
        pytest.param({"concurrency": 0}, "between 1 and", id="zero concurrency"),
        pytest.param({"colour": "red", "concurrency": 1}, "unknown limit field", id="unknown field"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_field(fields, error):
    with pytest.raises((TypeError, ValueError), match=error):
        NamedLimit.from_dict(fields, "openai")


async def test_limits_survive_a_restart(flux):
    await flux.d.limits.create("default", NamedLimit("openai", rate="10/m", burst=2))
    from flux.dispatcher.state.named_limits import LimitBook

    book = LimitBook(flux.store)
    await book.load()
    assert book.get("default", "openai") == NamedLimit("openai", rate="10/m", burst=2)
