"""Preemption through the dispatcher: who is stopped, the fence while it stops, and the requeue.

The planner's choices are tested pure in test_preemption.py; here the dispatcher
carries them out: the worker is told (``Stop`` with ``preempted``), the room
stays held until the worker hands the execution back or the grace runs out, a
claim or result of the stopped try is refused, and the execution goes back in
line without an attempt counted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.state.session import Stop
from flux.domain.execution import State
from flux.domain.tenant import Limits, Tenant
from flux.errors import FailedPrecondition
from flux.observe.status import StatusBoard
from tests.unit.harness import SETTINGS, Flux, Worker, settled

pytestmark = pytest.mark.timeout(10)

CREATED, SCHEDULED, RUNNING, COMPLETED = State.CREATED, State.SCHEDULED, State.RUNNING, State.COMPLETED
GRACE = 20.0


async def cohort(preemption: bool = True, claimed: int = 4) -> tuple[Flux, Worker, list[str]]:
    """ml and web, 2 cores of quota each in cohort research, on one 8-core worker; web runs
    four (two of them borrowed from ml) and ml has submitted nothing yet."""
    flux = Flux()
    settings = dataclasses.replace(SETTINGS, preemption=preemption, preemption_grace=GRACE)
    flux.d = Dispatcher(flux.store, settings, clock=flux.clock)
    await flux.start()
    flux.d.apply_tenants([Tenant("ml", Limits(cpu=2), "research"), Tenant("web", Limits(cpu=2), "research")])
    await flux.workflow("job", cpu=1)
    w = await flux.worker(cpu=8)
    web = [(await flux.d.submit("job", tenant="web")).execution_id for _ in range(5)]
    assert w.scheduled() == web[:4]  # the fifth waits: the cohort's 4 cores are all in use
    for execution_id in web[:claimed]:
        w.claim(execution_id)
    return flux, w, web


async def step(flux: Flux, seconds: float = 1.0) -> None:
    """One housekeeping step ``seconds`` later (well within the preemption grace)."""
    flux.d.housekeeper.tick(flux.clock.advance(seconds))
    await settled()


def preempted(w: Worker) -> list[str]:
    return [e.execution_id for e in w.events() if isinstance(e, Stop) and e.preempted]


async def test_a_tenant_under_its_quota_preempts_the_newest_borrowed_execution():
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    # At once, on submission: the newest of the two borrowed (one is enough for one core).
    assert preempted(w) == [web[3]]
    assert flux.d.events.counters.preempted["reclaim"] == 1
    # Until the worker hands it back its room stays held: nothing else is placed in it.
    assert flux.state(web[3]) is RUNNING and flux.state(mine) is CREATED
    assert "waiting for 1 preempted execution to stop" in (await flux.d.why(mine)).summary
    # ml's next one waits behind it in its lane. Were its submission not to plan (as for a while
    # after a plan for its shape found nothing), explain tells what reclaiming its core would take.
    shape = flux.d.catalogue.shape_of(flux.get(mine))
    flux.d.reclaimer._hopeless[shape] = flux.clock()
    second = (await flux.d.submit("job", tenant="ml")).execution_id
    summary = (await flux.d.why(second)).summary
    assert "will preempt 1 execution of tenant web" in summary, summary
    # The step plans the rest of ml's lane beside the first (as if its victim were gone): web's
    # other borrowed core, and no more (ml is then at its quota of 2).
    await step(flux)
    assert preempted(w) == [web[2]]
    await step(flux)
    assert preempted(w) == []  # planned once: their victims are still stopping

    w.release(web[3])
    assert w.scheduled() == [mine]  # ml's share is the lowest: it goes first
    victim = flux.get(web[3])
    assert victim.state is CREATED and victim.attempt == 1  # its attempt did not count
    assert flux.d.events.counters.requeued["preempted"] == 1
    assert flux.d.events.counters.requeued["released"] == 0
    # Back in line at its old place, ahead of web's fifth, once stored.
    await settled()
    assert flux.d.queue.position(web[3]) == 0 and flux.d.queue.position(web[4]) == 1
    w.release(web[2])
    assert w.scheduled() == [second]
    assert flux.d.events.counters.preempted["reclaim"] == 2
    await flux.d.stop()


async def test_the_stopped_try_is_fenced_and_a_late_result_frees_the_room_at_once():
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    await step(flux)
    assert preempted(w) == [web[3]]
    generation = w.generation(web[3])
    with pytest.raises(FailedPrecondition, match="was preempted .* result is not recorded"):
        await w.complete(web[3], '"late"', generation=generation)
    victim = flux.get(web[3])
    assert victim.state is CREATED and victim.output_json != '"late"'
    assert w.scheduled() == [mine]
    # The old generation stays fenced after the requeue, as for any requeued dispatch.
    with pytest.raises(FailedPrecondition):
        w.claim(web[3], generation=generation)
    await flux.d.stop()


async def test_a_worker_that_never_hands_it_back_loses_the_room_at_the_grace_end():
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert preempted(w) == [web[3]]
    flux.d.housekeeper.tick(flux.clock.advance(GRACE - 1))
    assert flux.state(web[3]) is RUNNING and w.scheduled() == []
    flux.d.housekeeper.tick(flux.clock.advance(1))
    assert flux.get(web[3]).state is CREATED and flux.get(web[3]).attempt == 1
    assert w.scheduled() == [mine]
    assert flux.d.events.counters.requeued["preempted"] == 1
    await flux.d.stop()


async def test_a_stop_lost_with_the_stream_is_repeated_on_the_next_one():
    # Found by the chaos run: a worker whose stream was cut before it read the Stop came back
    # within the grace and kept running the victim; at the grace end its room went to the
    # preemptor while the victim's body still ran beside it.
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert web[3] in flux.d.reclaimer.stopping  # the Stop waits in the stream, unread...
    w.disconnect()  # ...and goes with it
    w.connect()
    events = w.events()
    assert [(e.execution_id, e.preempted) for e in events if isinstance(e, Stop)] == [(web[3], True)]
    w.release(web[3])
    assert w.scheduled() == [mine]
    await flux.d.stop()


async def test_at_the_grace_end_the_victim_is_stopped_before_its_room_is_given_away():
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert preempted(w) == [web[3]]  # and suppose this Stop never reached the worker
    flux.d.housekeeper.tick(flux.clock.advance(GRACE))
    events = w.events()
    stops = [i for i, e in enumerate(events) if isinstance(e, Stop) and e.execution_id == web[3]]
    dispatched = [
        i for i, e in enumerate(events) if not isinstance(e, Stop) and e.execution.execution_id == mine
    ]
    # Stopped again (nothing left to hand back: not as preempted), ahead of the preemptor's dispatch.
    assert len(stops) == 1 and not events[stops[0]].preempted and stops[0] < dispatched[0]
    await flux.d.stop()


async def test_a_victim_whose_worker_is_lost_is_requeued_as_preempted_not_as_a_failed_attempt():
    flux, w, web = await cohort()
    await flux.d.submit("job", tenant="ml")
    await step(flux)
    assert preempted(w) == [web[3]]
    w.disconnect()
    flux.expire(SETTINGS.grace_period)
    attempts = {i: flux.get(i).attempt for i in web[:4]}
    assert attempts == {web[0]: 2, web[1]: 2, web[2]: 2, web[3]: 1}
    assert flux.d.events.counters.requeued["preempted"] == 1
    assert flux.d.events.counters.requeued["worker_lost"] == 3
    await flux.d.stop()


async def test_nothing_is_preempted_with_preemption_off_or_for_a_tenant_at_its_quota():
    flux, w, web = await cohort(preemption=False)
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    await step(flux)
    assert preempted(w) == [] and flux.state(mine) is CREATED
    assert "will preempt" not in (await flux.d.why(mine)).summary
    await flux.d.stop()

    # web's fifth, above web's quota, may not reclaim anything: only ml may.
    flux, w, web = await cohort()
    await step(flux)
    assert preempted(w) == []
    assert flux.d.events.counters.preempted["reclaim"] == 0
    await flux.d.stop()


async def test_a_client_cancel_of_a_stopping_victim_ends_it_and_the_room_goes_to_the_preemptor():
    flux, w, web = await cohort()
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    await step(flux)
    assert preempted(w) == [web[3]]
    await flux.d.cancel(web[3])
    assert flux.state(web[3]) is State.CANCELLED
    # The next step forgets the stop, lifts ml's reservation, and its pass places ml's run.
    await step(flux)
    assert w.scheduled() == [mine]
    flux.d.housekeeper.tick(flux.clock.advance(GRACE))  # its stop is forgotten, not requeued again
    assert flux.state(web[3]) is State.CANCELLED
    assert flux.d.events.counters.requeued["preempted"] == 0
    assert flux.d.reclaimer.stopping == {} and flux.d.reclaimer.waiting == {}
    await flux.d.stop()


async def test_a_dispatch_preempted_before_its_claim_is_refused_and_frees_the_room_at_once():
    flux, w, web = await cohort(claimed=3)
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert preempted(w) == [web[3]] and flux.state(web[3]) is SCHEDULED
    with pytest.raises(FailedPrecondition, match="was preempted"):
        w.claim(web[3])
    assert flux.get(web[3]).state is CREATED and w.scheduled() == [mine]
    await flux.d.stop()


async def test_a_victim_requeued_some_other_way_lets_its_preemptor_plan_again_at_the_next_step():
    flux, w, web = await cohort(claimed=3)
    mine = (await flux.d.submit("job", tenant="ml")).execution_id
    assert preempted(w) == [web[3]]
    # Its dispatch was never claimed: the ack deadline requeues it (as an expiry, not a preemption).
    await step(flux, SETTINGS.ack_deadline)
    assert flux.d.events.counters.requeued["ack_deadline"] == 1
    assert flux.d.reclaimer.waiting == {} and flux.d.reclaimer.stopping == {}
    assert w.scheduled() == [mine]  # the room it left goes to ml first (fair share)
    await flux.d.stop()


@settings(max_examples=30, deadline=None)
@given(
    nominal=st.integers(1, 4),
    gpus=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    hand_back=st.booleans(),
)
def test_through_the_dispatcher_a_returning_tenant_gets_its_quota_back_within_one_grace(
    nominal: int, gpus: list[int], hand_back: bool
) -> None:
    """web borrowed every GPU of the fleet; ml (nominal GPUs of quota) submits that many 1-GPU
    executions. Within one preemption grace, whether the workers hand the victims back or not,
    ml runs its whole quota, and exactly as many of web's were preempted (none freed nothing)."""
    asyncio.run(_reclaim_scenario(nominal, gpus, hand_back))


async def _reclaim_scenario(nominal: int, gpus: list[int], hand_back: bool) -> None:
    total = sum(gpus)
    nominal = min(nominal, total)
    flux = Flux()
    flux.d = Dispatcher(flux.store, dataclasses.replace(SETTINGS, preemption_grace=GRACE), clock=flux.clock)
    await flux.start()
    flux.d.apply_tenants(
        [
            Tenant("ml", Limits(gpu=nominal), "research"),
            Tenant("web", Limits(gpu=total - nominal), "research"),
        ]
    )
    await flux.workflow("gpu_job", gpu=1)
    workers = [await flux.worker(f"w{i}", cpu=8, gpus=n) for i, n in enumerate(gpus)]
    web = [(await flux.d.submit("gpu_job", tenant="web")).execution_id for _ in range(total)]
    for w in workers:
        for execution_id in w.scheduled():
            w.claim(execution_id)
    ml = [(await flux.d.submit("gpu_job", tenant="ml")).execution_id for _ in range(nominal)]
    stopped: list[str] = []
    for _ in range(3):  # a few housekeeping steps, a second apart: well within the grace
        await step(flux)
        for w in workers:
            for execution_id in preempted(w):
                stopped.append(execution_id)
                if hand_back:
                    w.release(execution_id)
    if not hand_back:
        await step(flux, GRACE)  # the grace runs out: their room is freed anyway
    held = {State.SCHEDULED, State.RUNNING}
    assert sum(flux.state(i) in held for i in ml) == nominal
    assert len(stopped) == len(set(stopped)) == nominal
    assert sum(flux.state(i) in held for i in web) == total - nominal
    for w in workers:  # nothing overcommitted: one GPU each
        entry = flux.d.registry.entries[w.name]
        assert len(entry.holdings) <= len(entry.resources.gpus)
    await flux.d.stop()


async def test_a_preemptor_that_needs_two_victims_keeps_the_room_of_the_first_until_the_second_stops():
    flux = Flux()
    flux.d = Dispatcher(flux.store, dataclasses.replace(SETTINGS, preemption_grace=GRACE), clock=flux.clock)
    await flux.start()
    flux.d.apply_tenants([Tenant("ml", Limits(gpu=2), "research"), Tenant("web", Limits(gpu=2), "research")])
    await flux.workflow("one_gpu", gpu=1)
    await flux.workflow("two_gpus", gpu=2)
    w = await flux.worker("w1", cpu=8, gpus=4)
    web = [(await flux.d.submit("one_gpu", tenant="web")).execution_id for _ in range(5)]
    assert w.scheduled() == web[:4]  # two of ml's GPUs borrowed; the fifth waits
    for execution_id in web[:4]:
        w.claim(execution_id)
    mine = (await flux.d.submit("two_gpus", tenant="ml")).execution_id
    assert sorted(preempted(w)) == sorted(web[2:4])
    w.release(web[3])
    # One GPU free: not enough for ml's two, and web (back within what the cohort lends, were it
    # not for ml's reservation) must not take it back.
    assert w.scheduled() == [] and flux.state(mine) is CREATED
    # Status shows what runs, not the reservation: ml holds nothing yet, web its three.
    held = {name: used[2] for name, used, _, _ in (await StatusBoard(flux.d).snapshot()).tenants}
    assert held == {"ml": 0, "web": 3}
    w.release(web[2])
    assert w.scheduled() == [mine]
    assert flux.d.usage.reserved == {}
    await flux.d.stop()


async def test_on_replicas_a_preemption_the_database_cannot_take_is_left_and_planned_again_later():
    """The replica binder asks the database whether it may act; when it may not (another replica
    acts) or cannot ask (the database is down), nothing is stopped and the preemptor waits a while."""
    from flux.dispatcher.modes.shared.binder import SharedBinder
    from flux.dispatcher.modes.shared.replica import Background

    class Database:
        def __init__(self, answer: bool | Exception) -> None:
            self.answer = answer

        async def take_preemption(self, preemptor: str, now: float, stale_before: float) -> bool:
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    for answer in (False, OSError("database unavailable")):
        flux = Flux()
        await flux.start()
        binder = SharedBinder(Database(answer), Background())  # type: ignore[arg-type]
        binder.attach(flux.d)
        acted: list[str] = []
        flux.d.reclaimer.waiting["p1"] = set()  # planned, the binder deciding
        binder.preempt("p1", functools.partial(acted.append, "p1"))
        await settled()
        assert acted == []
        assert "p1" not in flux.d.reclaimer.waiting
        assert flux.d.reclaimer._elsewhere["p1"] > flux.clock()
        await flux.d.stop()
