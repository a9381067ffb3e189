"""Flow control through the dispatcher (in-memory store, fake workers, a hand-driven clock)."""

from __future__ import annotations

import pytest

from flux.domain.execution import State
from flux.domain.limits import Concurrency, Flow, RateLimit
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from flux.errors import InvalidArgument

pytestmark = pytest.mark.timeout(10)


async def limited(flux, name: str, flow: Flow) -> WorkflowRecord:
    declared = WorkflowRecord(name, 0, "", "main", ResourceRequest(), {}, 3, flow=flow)
    [record] = await flux.d.register_workflows(f"{name}.py", f"# {name}\n", [declared])
    return record


async def test_at_most_max_per_key_and_the_next_of_a_key_when_one_ends(flux):
    await limited(flux, "per_customer", Flow(Concurrency(2, key="customer")))
    w = await flux.worker(capacity=16)
    acme = [await flux.run("per_customer", '{"customer": "acme"}') for _ in range(4)]
    beta = await flux.run("per_customer", '{"customer": "beta"}')
    assert set(w.scheduled()) == {acme[0], acme[1], beta}
    assert flux.state(acme[2]) is State.CREATED
    assert flux.get(acme[0]).flow_keys == (("concurrency", "acme"),)
    why = await flux.d.why(acme[2])
    assert "key customer=acme at 2/2 running" in why.summary
    w.claim(acme[0])
    await w.complete(acme[0])
    assert w.scheduled() == [acme[2]]


async def test_waiting_work_holds_no_room_and_blocks_no_unlimited_work(flux):
    await limited(flux, "one_at_a_time", Flow(Concurrency(1)))
    await flux.workflow("free")
    w = await flux.worker(capacity=2)
    first = await flux.run("one_at_a_time")
    waiting = [await flux.run("one_at_a_time") for _ in range(5)]
    free = await flux.run("free")
    assert w.scheduled() == [first, free]
    assert all(flux.state(e) is State.CREATED for e in waiting)
    assert waiting[0] not in flux.d.queue  # not in line for a worker at all


async def test_a_cancelled_holder_frees_its_slot(flux):
    await limited(flux, "one", Flow(Concurrency(1)))
    w = await flux.worker()
    first = await flux.run("one")
    second = await flux.run("one")
    assert w.scheduled() == [first]
    await flux.d.cancel(first)
    assert second in [e for e in w.scheduled()]


async def test_a_run_key_overrides_the_input(flux):
    await limited(flux, "keyed", Flow(Concurrency(1, key="customer")))
    w = await flux.worker()
    a = await flux.d.submit("keyed", '{"customer": "x"}', overrides=_key("k1"))
    b = await flux.d.submit("keyed", '{"customer": "x"}', overrides=_key("k2"))
    assert {a.execution_id, b.execution_id} == set(w.scheduled())
    assert a.flow_keys == (("concurrency", "k1"),)


async def test_an_input_without_the_key_field_is_refused(flux):
    await limited(flux, "keyed", Flow(Concurrency(1, key="customer")))
    with pytest.raises(InvalidArgument, match="no field 'customer'"):
        await flux.run("keyed", '{"other": 1}')


async def test_rate_limit_dispatches_one_token_at_a_time(flux):
    await limited(flux, "paced", Flow(rate_limit=RateLimit("2/s")))
    w = await flux.worker(capacity=16)
    runs = [await flux.run("paced") for _ in range(3)]
    assert w.scheduled() == [runs[0]]
    why = await flux.d.why(runs[1])
    assert "rate limit paced: next token in 0.5 s" in why.summary
    flux.expire(0.25)
    assert w.scheduled() == []
    flux.expire(0.25)
    assert w.scheduled() == [runs[1]]
    flux.expire(0.5)
    assert w.scheduled() == [runs[2]]
    assert flux.d.flow.control.rate_limited == {"paced": 2}


def _key(key: str):
    from flux.dispatcher.transitions.submission import Overrides

    return Overrides(key=key)


async def test_after_a_restart_a_key_s_running_work_holds_its_slot_before_its_worker_is_back(flux):
    # Found by the chaos run's key invariant: recovered RUNNING rows were held before they were in
    # the table, so their slots were not charged and pending work of the key started beside them.
    from tests.unit.harness import Flux

    await limited(flux, "per_customer", Flow(Concurrency(1, key="customer")))
    w = await flux.worker(capacity=4)
    first = await flux.run("per_customer", '{"customer": "acme"}')
    second = await flux.run("per_customer", '{"customer": "acme"}')
    w.claim(first)
    assert flux.state(second) is State.CREATED
    await flux.d.stop()

    again = await Flux(flux.store, flux.clock).start()
    try:
        other = await again.worker("other", capacity=4)
        assert again.state(first) is State.RUNNING  # waiting for its worker's grace period
        assert other.scheduled() == []  # acme's one slot is first's
        assert "key customer=acme at 1/1 running" in (await again.d.why(second)).summary
    finally:
        await again.d.stop()
