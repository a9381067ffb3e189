"""Priorities and aging through the dispatcher: the call sites that feed the pure matcher."""

from __future__ import annotations

import dataclasses

import pytest

from flux.dispatcher.core import Dispatcher
from flux.domain.execution import State
from flux.domain.resource_request import ResourceRequest
from flux.errors import InvalidArgument
from flux.observe.status import StatusBoard
from flux.store.base import WorkflowRecord
from tests.unit.harness import SETTINGS, Flux

pytestmark = pytest.mark.timeout(10)

CREATED, SCHEDULED = State.CREATED, State.SCHEDULED


async def started(starvation_after: float) -> Flux:
    flux = Flux()
    flux.d = Dispatcher(
        flux.store, dataclasses.replace(SETTINGS, starvation_after=starvation_after), clock=flux.clock
    )
    return await flux.start()


async def declare(flux: Flux, name: str, cpu: int, priority: int = 0) -> None:
    record = WorkflowRecord(name, 0, "", "main", ResourceRequest(cpu=cpu), {}, 3, priority=priority)
    await flux.d.register_workflows(f"{name}.py", f"# {name}\n", [record])


async def test_a_later_higher_priority_run_is_dispatched_before_an_earlier_low_one():
    flux = await started(30)
    await declare(flux, "job", cpu=4)
    w = await flux.worker(cpu=4)
    blocker = await flux.run()
    assert w.scheduled() == [blocker]
    low = (await flux.d.submit("job")).execution_id
    high = await flux.d.submit("job", priority=5)
    assert high.priority == 5 and flux.get(low).priority == 0
    assert (await flux.d.why(low)).queue_position == 1  # the high one is ahead
    w.claim(blocker)
    await w.complete(blocker)
    assert w.scheduled() == [high.execution_id]
    assert flux.state(low) is CREATED
    await flux.d.stop()


async def test_the_workflow_priority_is_the_default_and_a_run_may_override_it():
    flux = await started(30)
    await declare(flux, "urgent", cpu=1, priority=3)
    assert (await flux.d.submit("urgent")).priority == 3
    assert (await flux.d.submit("urgent", priority=-2)).priority == -2
    with pytest.raises(InvalidArgument, match=r"priority must be between -1000 and 1000 .*; got 1001"):
        await flux.d.submit("urgent", priority=1001)
    bad = WorkflowRecord("bad", 0, "", "main", ResourceRequest(), {}, 3, priority=5000)
    with pytest.raises(InvalidArgument, match=r"workflows\[0\]\.priority must be between -1000 and 1000"):
        await flux.d.register_workflows("bad.py", "# bad\n", [bad])
    await flux.d.stop()


async def _starving(flux: Flux):
    """A 4-core worker running four cpu=1 executions, and a cpu=4 one submitted behind them."""
    await declare(flux, "small", cpu=1)
    await declare(flux, "big", cpu=4, priority=-10)
    w = await flux.worker(cpu=4)
    running = [await flux.run("small") for _ in range(4)]
    assert w.scheduled() == running
    for execution_id in running:
        w.claim(execution_id)
    big = await flux.run("big")
    return w, running, big


async def test_past_starvation_after_the_worker_is_nominated_and_the_big_one_placed_when_it_frees():
    flux = await started(30)
    w, running, big = await _starving(flux)
    flux.clock.advance(31)
    flux.d.place()  # the safety tick's whole-fleet pass
    assert flux.d.aging.by_execution[big].worker == "w1"
    small = await flux.run("small")
    for execution_id in running[:3]:
        await w.complete(execution_id)
    # Three cores free, but the small one would delay the nominee: nothing new goes there.
    assert w.scheduled() == [] and flux.state(small) is CREATED
    why = await flux.d.why(small)
    assert f"1 is reserved for {big}, waiting 31s" in why.summary
    nominee = await flux.d.why(big)
    assert nominee.explanation is not None and nominee.explanation.nominated == "w1"
    assert "nominated worker w1" in nominee.summary
    status = await StatusBoard(flux.d).snapshot()
    row = next(p for p in status.pending if p.oldest_execution_id == big)
    assert row.nominated_worker == "w1" and "nominated worker w1" in row.summary
    await w.complete(running[3])
    assert w.scheduled() == [big]
    assert not flux.d.aging.by_execution
    await flux.d.stop()


async def test_without_aging_the_small_stream_keeps_the_cores():
    flux = await started(0)
    w, running, big = await _starving(flux)
    flux.clock.advance(3600)
    flux.d.place()
    for execution_id in running:
        small = await flux.run("small")
        await w.complete(execution_id)
        assert w.scheduled() == [small]
        w.claim(small)
    assert flux.state(big) is CREATED
    await flux.d.stop()
