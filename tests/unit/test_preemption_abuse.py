"""Preemption that cannot be abused (issue 40): a tenant's budget of victims a minute, a
cancelled preemptor's stops withdrawn, and explain that names no other tenant to a tenant.

The budget and the wording are pure (``flux.matching.preemption``); the withdrawal and the
budget's use are the dispatcher's, with the fake worker of test_reclaim.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from flux.dispatcher.core import Dispatcher
from flux.domain.execution import State
from flux.domain.tenant import Limits, Tenant
from flux.matching import Budget, Preemption, Running, Shape
from tests.unit.harness import SETTINGS, Flux, Worker, settled
from tests.unit.test_reclaim import GRACE, preempted, step

pytestmark = pytest.mark.timeout(10)

CREATED, RUNNING = State.CREATED, State.RUNNING


# ----------------------------------------------------------------- the budget, pure


def test_a_fresh_budget_allows_a_minutes_worth_at_once_then_refills_at_its_rate():
    budget = Budget(60)
    assert budget.allows("ml", 60, now=0.0)
    budget.spend("ml", 60, now=0.0)
    assert not budget.allows("ml", 1, now=0.0)
    assert budget.next_in("ml", 1, now=0.0) == pytest.approx(1.0)  # one a second
    assert budget.allows("ml", 1, now=1.0)
    assert budget.next_in("ml", 30, now=1.0) == pytest.approx(29.0)
    assert budget.allows("ml", 60, now=61.0)  # never more than a minute's worth
    budget.spend("ml", 60, now=61.0)
    assert not budget.allows("ml", 2, now=62.0)


@pytest.mark.parametrize(
    ("per_minute", "spent", "victims", "allowed"),
    [
        pytest.param(2, 0, 2, True, id="exactly the budget"),
        pytest.param(2, 1, 2, False, id="one short"),
        pytest.param(2, 0, 5, True, id="more than the whole budget, from a full bucket"),
        pytest.param(2, 1, 5, False, id="more than the whole budget, from a partial bucket"),
        pytest.param(0, 1000, 1000, True, id="0 is no limit"),
    ],
)
def test_budget_boundaries(per_minute, spent, victims, allowed):
    budget = Budget(per_minute)
    if spent:
        budget.spend("ml", spent, now=0.0)
    assert budget.allows("ml", victims, now=0.0) is allowed


def test_budgets_are_per_tenant_and_a_plan_larger_than_the_budget_leaves_a_debt():
    budget = Budget(2)
    budget.spend("ml", 5, now=0.0)  # allowed from a full bucket; 3 owed
    assert budget.allows("web", 2, now=0.0)
    assert budget.next_in("ml", 1, now=0.0) == pytest.approx(4 * 30.0)  # -3 -> 1 at 2 a minute
    assert budget.held_back("ml", 1, now=0.0) == (
        "reclaim held back: tenant's preemption budget of 2 a minute is spent; next in 120 s"
    )
    assert budget.held_back("web", 1, now=0.0) == ""


def test_a_refund_never_fills_the_bucket_past_its_size():
    budget = Budget(3)
    budget.spend("ml", 1, now=0.0)
    budget.refund("ml", 5, now=0.0)
    budget.spend("ml", 3, now=0.0)
    assert not budget.allows("ml", 1, now=0.0)


# ----------------------------------------------------------------- explain's wording, pure


def _victims(*tenants: str) -> Preemption:
    return Preemption(
        "p", "w1", tuple(Running(f"v{i}", Shape(tenant=t), "w1") for i, t in enumerate(tenants))
    )


@pytest.mark.parametrize(
    ("tenants", "viewer", "said"),
    [
        pytest.param(("web",), "", "will preempt 1 execution of tenant web", id="cluster admin: named"),
        pytest.param(("web",), "ml", "will preempt 1 execution of another tenant", id="tenant: unnamed"),
        pytest.param(
            ("web", "web", "ops"), "ml", "will preempt 3 executions of 2 other tenants", id="two others"
        ),
        pytest.param(
            ("web", "ops"),
            "",
            "will preempt 1 execution of tenant web and 1 execution of tenant ops",
            id="cluster admin: each named",
        ),
    ],
)
def test_a_preemption_names_other_tenants_only_to_a_cluster_admin(tenants, viewer, said):
    assert _victims(*tenants).describe(viewer) == said


# ----------------------------------------------------------------- through the dispatcher


async def cohort(budget: int = 60) -> tuple[Flux, Worker, list[str]]:
    """test_reclaim's cohort (ml and web, 2 cores each, web borrowing 2 of an 8-core worker's
    4 usable), with ``budget`` victims a minute."""
    flux = Flux()
    settings = dataclasses.replace(
        SETTINGS, preemption=True, preemption_grace=GRACE, preemption_budget=budget
    )
    flux.d = Dispatcher(flux.store, settings, clock=flux.clock)
    await flux.start()
    flux.d.apply_tenants([Tenant("ml", Limits(cpu=2), "research"), Tenant("web", Limits(cpu=2), "research")])
    await flux.workflow("job", cpu=1)
    w = await flux.worker(cpu=8)
    web = [(await flux.d.submit("job", tenant="web")).execution_id for _ in range(5)]
    assert w.scheduled() == web[:4]
    for execution_id in web[:4]:
        w.claim(execution_id)
    return flux, w, web


async def test_a_cancelled_preemptor_withdraws_its_stops_and_the_victim_runs_on():
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert preempted(w) == [web[3]]
    generation = w.generation(web[3])
    # ml cancels before web's worker has handed the victim back: the stop is withdrawn.
    await flux.d.cancel(mine)
    await step(flux)
    victim = flux.get(web[3])
    assert victim.state is RUNNING and victim.generation == generation  # not requeued
    assert not flux.d.reclaimer.is_stopping(victim)
    assert flux.d.events.counters.requeued["preempted"] == 0
    assert mine not in flux.d.usage.reserved  # the preemptor's reservation is lifted
    # Its result is accepted again: the victim ran to its end on the room it kept.
    done = await w.complete(web[3], '"done"', generation=generation)
    assert done.state is State.COMPLETED
    await flux.d.stop()


async def test_a_worker_that_already_acted_on_a_withdrawn_stop_hands_it_back_as_released():
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert preempted(w) == [web[3]]
    await flux.d.cancel(mine)
    requeued = w.release(web[3])  # it had stopped the body already
    assert requeued.state is CREATED and requeued.attempt == 1
    counters = flux.d.events.counters
    assert counters.requeued["released"] == 1 and counters.requeued["preempted"] == 0
    await flux.d.stop()


async def test_a_tenant_that_submits_and_cancels_in_a_loop_stops_no_more_than_its_budget():
    flux, w, web = await cohort(budget=2)
    stops: list[str] = []
    for _ in range(6):  # the review's loop: submit, have it preempt, cancel
        mine = (await flux.d.submit("job", tenant="ml")).execution_id
        stops += preempted(w)
        await flux.d.cancel(mine)
        await step(flux, 0.1)
    assert len(stops) == 2  # the budget: 2 a minute, whatever the loop does
    counters = flux.d.events.counters
    assert counters.preemptions_refused["budget"] >= 1
    assert counters.preemptions_refused_by_tenant[("ml", "budget")] >= 1
    assert all(flux.get(e).generation == w.generation(e) for e in web[:4])

    # Explain says why reclaim waits, and for how long; then, a minute on, it goes ahead.
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert preempted(w) == []
    summary = (await flux.d.why(mine, "ml")).summary
    assert "reclaim held back: tenant's preemption budget of 2 a minute is spent; next in" in summary
    assert "web" not in summary
    await step(flux, 60.0)
    assert len(preempted(w)) == 1
    await flux.d.stop()


async def test_explain_to_a_tenant_says_another_tenant_and_to_a_cluster_admin_names_it():
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert preempted(w) == [web[3]]
    # The next of ml's lane, planned in explain only (as after a plan that found nothing).
    shape = flux.d.catalogue.shape_of(flux.get(mine))
    flux.d.reclaimer._hopeless[shape] = flux.clock()
    second = (await flux.d.submit("job", tenant="ml")).execution_id
    await settled()
    assert "will preempt 1 execution of tenant web" in (await flux.d.why(second)).summary
    as_ml = (await flux.d.why(second, "ml")).summary
    assert "will preempt 1 execution of another tenant" in as_ml and "web" not in as_ml
    await flux.d.stop()
