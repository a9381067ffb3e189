"""The cycle applies what a bind answers, placement by placement (cycle/placing.py ``apply``).

A scripted binder answers each bind with the outcome the test puts next, at once or later
(as a replica's claim lands), and binds as one server does when nothing is scripted.
"""

from __future__ import annotations

import asyncio

import pytest

from flux.dispatcher.handle import Binding, Bound, Modes, Outcome
from flux.dispatcher.modes.local import LocalBinder, LocalFleet, NoFeed
from flux.domain.execution import State
from flux.matching import Placement
from tests.unit.harness import Flux, settled

pytestmark = pytest.mark.timeout(10)


class ScriptedBinder(LocalBinder):
    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self.later: list[tuple[list[Bound], asyncio.Future[list[Bound]]]] = []
        self.deferred = False

    def bind(self, placements: list[Placement]) -> Binding:
        if self.deferred:
            bound: asyncio.Future[list[Bound]] = asyncio.get_running_loop().create_future()
            # The rows are built now, as a replica's claim is: the cancel comes in between.
            self.later.append((super().bind(placements), bound))
            return bound
        if not self.outcomes:
            return super().bind(placements)
        outcome = self.outcomes.pop(0)
        return [Bound(p, outcome) for p in placements]

    def land(self) -> None:
        """The oldest deferred bind lands: every placement won, as one server binds it."""
        won, bound = self.later.pop(0)
        bound.set_result(won)


@pytest.fixture
async def flux():
    f = await Flux(modes=Modes(ScriptedBinder(), NoFeed(), LocalFleet())).start()
    yield f
    await f.d.stop()


def binder(flux: Flux) -> ScriptedBinder:
    assert isinstance(flux.d.binder, ScriptedBinder)
    return flux.d.binder


def queued(flux: Flux) -> list[str]:
    queue = flux.d.pending()
    return [p.execution_id for shape in queue.shapes() for p in queue.iter_shape(shape)]


async def test_a_refused_placement_goes_back_in_line_and_the_room_it_held_is_offered_again(
    flux: Flux,
) -> None:
    await flux.workflow(cpu=4)
    binder(flux).outcomes = [Outcome.REFUSED]
    w = await flux.worker(cpu=4)
    execution_id = await flux.run()
    # Refused once, unreserved, queued again; the freed room's pass bound it the second time.
    assert w.scheduled() == [execution_id] and flux.holdings("w1") == {execution_id}
    assert flux.state(execution_id) is State.SCHEDULED and queued(flux) == []


async def test_a_failed_bind_unreserves_and_queues_again_without_a_pass(flux: Flux) -> None:
    await flux.workflow(cpu=4)
    binder(flux).outcomes = [Outcome.FAILED]
    w = await flux.worker(cpu=4)
    execution_id = await flux.run()
    assert w.events() == [] and flux.holdings("w1") == set()
    assert queued(flux) == [execution_id] and flux.state(execution_id) is State.CREATED
    await flux.tick()  # the safety tick's pass tries again
    assert w.scheduled() == [execution_id]


async def test_a_lost_placement_is_forgotten_here_and_its_room_freed(flux: Flux) -> None:
    await flux.workflow(cpu=4)
    binder(flux).outcomes = [Outcome.LOST]
    w = await flux.worker(cpu=4)
    execution_id = await flux.run()
    assert w.events() == [] and flux.holdings("w1") == set()
    assert execution_id not in flux.d.table and queued(flux) == []


async def test_a_bind_that_lands_after_its_worker_left_gives_the_row_back(flux: Flux) -> None:
    await flux.workflow(cpu=4)
    binder(flux).deferred = True
    w = await flux.worker(cpu=4)
    execution_id = await flux.run()
    assert flux.holdings("w1") == {execution_id} and queued(flux) == []
    w.disconnect()
    binder(flux).land()
    await settled()
    assert flux.state(execution_id) is State.CREATED and queued(flux) == [execution_id]
    assert w.events() == []


async def test_a_bind_that_lands_after_a_cancel_only_unreserves(flux: Flux) -> None:
    await flux.workflow(cpu=4)
    binder(flux).deferred = True
    w = await flux.worker(cpu=4)
    execution_id = await flux.run()
    assert (await flux.d.cancel(execution_id)).state is State.CANCELLED
    binder(flux).land()
    await settled()
    assert flux.holdings("w1") == set() and queued(flux) == []
    assert [e for e in w.events() if getattr(e, "execution", None) is not None] == []
