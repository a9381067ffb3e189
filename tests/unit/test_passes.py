"""When passes run (flux/dispatcher/cycle/passes.py): at once, or gathered into one per kind by together()."""

from __future__ import annotations

import asyncio

import pytest

from flux.dispatcher.cycle.passes import Passes
from flux.dispatcher.transitions.worker_calls import Result
from flux.domain.execution import State
from flux.domain.resource_request import ResourceRequest
from flux.matching import Shape
from tests.unit.harness import Flux

pytestmark = pytest.mark.timeout(10)

SCHEDULED, CREATED = State.SCHEDULED, State.CREATED
SMALL, BIG = Shape(ResourceRequest(cpu=1)), Shape(ResourceRequest(cpu=2))


class Worker:
    def __init__(self, name: str):
        self.name = name


def recorder() -> tuple[Passes, list[dict]]:
    runs: list[dict] = []

    def run(**scope: object) -> int:
        runs.append(scope)
        return 0

    return Passes(run), runs


def test_a_trigger_outside_a_block_runs_its_pass_at_once() -> None:
    passes, runs = recorder()
    w = Worker("w1")
    passes.work_added([SMALL])
    passes.room_freed([w])
    passes.everything()
    assert runs == [{"shapes": [SMALL]}, {"workers": [w]}, {}]


def test_nothing_added_or_freed_runs_no_pass() -> None:
    passes, runs = recorder()
    passes.work_added([])
    passes.room_freed([])
    with passes.together():
        passes.work_added(iter(()))
    assert runs == []


def test_a_block_runs_one_pass_per_kind_with_each_shape_and_worker_once_in_trigger_order() -> None:
    passes, runs = recorder()
    a, b = Worker("a"), Worker("b")
    with passes.together():
        passes.room_freed([a])
        passes.work_added([BIG, SMALL])
        passes.room_freed([b, a])
        passes.work_added([SMALL])
        assert runs == []  # nothing runs inside the block
    assert runs == [{"shapes": [BIG, SMALL]}, {"workers": [a, b]}]


def test_everything_in_a_block_stands_for_the_rest() -> None:
    passes, runs = recorder()
    with passes.together():
        passes.work_added([SMALL])
        passes.everything()
        passes.room_freed([Worker("a")])
    assert runs == [{}]


def test_nested_blocks_run_when_the_outermost_ends_and_an_error_still_runs_them() -> None:
    passes, runs = recorder()
    with pytest.raises(RuntimeError), passes.together():
        with passes.together():
            passes.work_added([SMALL])
        assert runs == []
        raise RuntimeError("a transition failed halfway")
    assert runs == [{"shapes": [SMALL]}]
    passes.work_added([BIG])  # the block is over: at once again
    assert runs[-1] == {"shapes": [BIG]}


async def test_a_batch_of_completions_runs_one_pass_and_the_freed_room_is_used(monkeypatch) -> None:
    flux = await Flux().start()
    try:
        await flux.workflow(cpu=1)
        w = await flux.worker(cpu=4)
        first = [await flux.run() for _ in range(4)]
        waiting = [await flux.run() for _ in range(3)]
        assert w.scheduled() == first
        flux.d.claim_batch("w1", w.token, [(e, 1) for e in first])
        scopes: list[dict] = []
        place = flux.d.place
        monkeypatch.setattr(flux.d, "place", lambda **scope: scopes.append(scope) or place(**scope))
        answers = await flux.d.complete_batch("w1", w.token, [Result(e, 1, "1", None) for e in first])
        assert answers == [None] * 4
        assert [list(s) for s in scopes] == [["workers"]]  # one pass for the four freed rooms
        assert w.scheduled() == waiting  # what the pass dispatched into them
    finally:
        await flux.d.stop()


async def test_submissions_one_commit_lands_get_one_pass_and_each_is_placed_before_its_call_returns(
    monkeypatch,
) -> None:
    flux = await Flux().start()
    try:
        await flux.workflow(cpu=1)
        w = await flux.worker(cpu=2)
        scopes: list[dict] = []
        place = flux.d.place
        monkeypatch.setattr(flux.d, "place", lambda **scope: scopes.append(scope) or place(**scope))
        # Four calls at once: their rows share one commit (the memory store batches as SQLite's does).
        answers = await asyncio.gather(*(flux.d.submit("job", "") for _ in range(4)))
        assert [list(s) for s in scopes] == [["shapes"]]  # one pass for the four, not four
        # Each call answered with what that pass made of it: two placed, two waiting for room.
        assert [a.state for a in answers] == [SCHEDULED, SCHEDULED, CREATED, CREATED]
        assert w.scheduled() == [a.execution_id for a in answers[:2]]
        assert [flux.state(a.execution_id) for a in answers] == [SCHEDULED, SCHEDULED, CREATED, CREATED]
    finally:
        await flux.d.stop()


async def test_a_failed_commit_queues_none_of_its_submissions_and_the_next_one_queues_its_own() -> None:
    flux = await Flux().start()
    try:
        await flux.workflow(cpu=1)
        w = await flux.worker(cpu=4)
        flux.store.fail_next_commit = OSError("disk full")
        failed = await asyncio.gather(*(flux.d.submit("job", "") for _ in range(3)), return_exceptions=True)
        assert [type(f).__name__ for f in failed] == ["Unavailable"] * 3
        assert flux.d.table.unfinished == {} and w.scheduled() == []
        placed = await asyncio.gather(*(flux.d.submit("job", "") for _ in range(2)))
        assert [a.state for a in placed] == [SCHEDULED, SCHEDULED]
        assert w.scheduled() == [a.execution_id for a in placed]
    finally:
        await flux.d.stop()
