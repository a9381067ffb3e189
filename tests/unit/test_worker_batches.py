"""ClaimBatch and CompleteBatch in the dispatcher: each item fenced and answered as its single call.

The same in-memory store and hand-driven clock as test_dispatcher.py (tests/unit/harness.py).
"""

from __future__ import annotations

import asyncio

import pytest

from flux.dispatcher.transitions.worker_calls import Result
from flux.domain.execution import ExecutionError, State
from flux.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, Unavailable
from flux.server import worker_convert
from flux.v1 import worker_pb2
from tests.unit.harness import Flux, committed, resources, settled

pytestmark = pytest.mark.timeout(10)

SCHEDULED, RUNNING, COMPLETED, FAILED = State.SCHEDULED, State.RUNNING, State.COMPLETED, State.FAILED


async def _dispatched(flux: Flux, n: int) -> tuple[object, list[str]]:
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=8)
    ids = [await flux.run() for _ in range(n)]
    assert w.scheduled() == ids
    return w, ids


def _kinds(answers: list) -> list[type | None]:
    return [None if a is None else type(a) for a in answers]


async def test_claim_batch_answers_each_item_in_order_and_a_refused_one_leaves_the_others(flux):
    w, [a, b, c] = await _dispatched(flux, 3)
    items = [(a, 1), (b, 7), ("ghost", 1), (c, 1)]  # b quotes a stale generation; ghost does not exist
    answers = flux.d.claim_batch("w1", w.token, items)
    assert _kinds(answers) == [None, FailedPrecondition, NotFound, None]
    assert "stale generation 7" in str(answers[1])
    assert [flux.state(i) for i in (a, b, c)] == [RUNNING, SCHEDULED, RUNNING]
    # Fenced as the single call: b's right generation still claims it, and a repeated claim is accepted.
    assert flux.d.claim_batch("w1", w.token, [(b, 1), (a, 1)]) == [None, None]
    assert flux.state(b) is RUNNING


async def test_claim_batch_of_another_workers_dispatch_is_refused_for_that_item_only(flux):
    await flux.workflow(cpu=4)
    a = await flux.worker("a", cpu=4)
    b = await flux.worker("b", cpu=4)
    first, second = await flux.run(), await flux.run()
    on_a = first if flux.get(first).worker == "a" else second
    on_b = second if on_a == first else first
    answers = flux.d.claim_batch("a", a.token, [(on_b, 1), (on_a, 1)])
    assert _kinds(answers) == [FailedPrecondition, None]
    assert "not dispatched to worker 'a'" in str(answers[0])
    assert (flux.state(on_a), flux.state(on_b)) == (RUNNING, SCHEDULED)
    assert b.token  # b's dispatch is untouched


@pytest.mark.parametrize("call", ["claim", "complete"])
async def test_a_wrong_session_token_refuses_the_whole_batch(flux, call):
    w, [a] = await _dispatched(flux, 1)
    with pytest.raises(PermissionDenied, match="session_token"):
        if call == "claim":
            flux.d.claim_batch("w1", "forged", [(a, 1)])
        else:
            await flux.d.complete_batch("w1", "forged", [Result(a, 1, "1", None)])
    assert flux.state(a) is SCHEDULED
    assert w.token


@pytest.mark.parametrize("size", [0, 4097])
async def test_a_batch_outside_its_limits_names_the_field(flux, size):
    w, [a] = await _dispatched(flux, 1)
    with pytest.raises(InvalidArgument, match="items"):
        flux.d.claim_batch("w1", w.token, [(a, 1)] * size)
    with pytest.raises(InvalidArgument, match="items"):
        await flux.d.complete_batch("w1", w.token, [Result(a, 1, "1", None)] * size)


async def test_complete_batch_answers_each_item_after_one_group_commit(flux):
    w, [a, b, c, d] = await _dispatched(flux, 4)
    assert flux.d.claim_batch("w1", w.token, [(a, 1), (b, 1), (c, 1)]) == [None, None, None]
    await committed()
    commits: list[set[str]] = []
    original = flux.store._commit

    def counted() -> None:
        commits.append({i for i, e in flux.store._queued.items() if e.state.finished})
        original()

    flux.store._commit = counted
    items = [
        Result(a, 1, '{"v": 1}', None),
        Result(d, 1, '"unclaimed"', None),  # refused: claim it first
        Result(b, 1, None, ExecutionError("ValueError", "bad")),
        Result(c, 1, "{oops", None),  # refused: not JSON
    ]
    answers = await flux.d.complete_batch("w1", w.token, items, resources(cpu=8))
    assert _kinds(answers) == [None, FailedPrecondition, None, InvalidArgument]
    assert "claim it before completing" in str(answers[1]) and "output_json" in str(answers[3])
    # Committed before the answer, both finals in one commit.
    assert [c for c in commits if c] == [{a, b}]
    assert (flux.store.executions[a].state, flux.store.executions[a].output_json) == (COMPLETED, '{"v": 1}')
    assert flux.store.executions[b].state is FAILED
    assert (flux.state(c), flux.state(d)) == (RUNNING, SCHEDULED)
    assert flux.holdings("w1") == {c, d}


async def test_a_complete_batch_cut_off_as_it_is_decided_still_stores_and_shows_its_results(flux):
    # A worker that dies mid-call cancels its CompleteBatch. Once the results are decided the
    # writes must go on: a final state decided but never written stays shown as RUNNING forever
    # (a client waiting for it never hears). The cut lands before the commits' waits start.
    w, [a, b] = await _dispatched(flux, 2)
    flux.d.claim_batch("w1", w.token, [(a, 1), (b, 1)])
    await committed()
    items = [Result(a, 1, '"a"', None), Result(b, 1, '"b"', None)]
    call = asyncio.ensure_future(flux.d.complete_batch("w1", w.token, items))
    await asyncio.sleep(0)  # decided; its commits' waits gathered, not yet started
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await settled()
    assert [flux.store.executions[i].output_json for i in (a, b)] == ['"a"', '"b"']
    assert (flux.state(a), flux.state(b)) == (COMPLETED, COMPLETED)


async def test_complete_batch_retried_after_a_failed_commit_stores_the_results(flux):
    w, [a, b] = await _dispatched(flux, 2)
    flux.d.claim_batch("w1", w.token, [(a, 1), (b, 1)])
    await committed()
    flux.store.fail_next_commit = OSError("disk full")
    items = [Result(a, 1, '"a"', None), Result(b, 1, '"b"', None)]
    answers = await flux.d.complete_batch("w1", w.token, items)
    assert _kinds(answers) == [Unavailable, Unavailable]  # the worker retries these items
    assert flux.store.executions[a].state is RUNNING
    assert await flux.d.complete_batch("w1", w.token, items) == [None, None]
    assert [flux.store.executions[i].output_json for i in (a, b)] == ['"a"', '"b"']


async def test_a_completed_item_frees_its_place_for_the_next_dispatch(flux):
    await flux.workflow(cpu=4)
    w = await flux.worker(cpu=4)
    first, queued = await flux.run(), await flux.run()
    assert w.scheduled() == [first]
    flux.d.claim_batch("w1", w.token, [(first, 1)])
    assert await flux.d.complete_batch("w1", w.token, [Result(first, 1, "1", None)], resources(cpu=4)) == [
        None
    ]
    assert w.scheduled() == [queued]


def test_item_answers_carry_the_status_name_the_single_call_would():
    answers = worker_convert.item_answers(
        [("a", 1), ("b", 2)], [None, FailedPrecondition("execution b is COMPLETED, not SCHEDULED")]
    )
    assert answers == [
        worker_pb2.ItemAnswer(execution_id="a", ok=True),
        worker_pb2.ItemAnswer(
            execution_id="b", code="FAILED_PRECONDITION", message="execution b is COMPLETED, not SCHEDULED"
        ),
    ]


def test_a_complete_item_without_a_result_names_its_field():
    with pytest.raises(InvalidArgument, match=r"items\[3\]\.result is missing"):
        worker_convert.result_from_proto(worker_pb2.CompleteItem(execution_id="a", generation=1), "items[3]")


async def test_a_result_that_carries_its_claim_claims_then_completes_in_one_item(flux):
    # A worker whose body ended before its claim was due sends the claim inside the result.
    w, [a, b, c] = await _dispatched(flux, 3)
    items = [
        Result(a, 1, '"a"', None, claim=True),
        Result(b, 7, '"b"', None, claim=True),  # a stale generation: refused as its claim would be
        Result(c, 1, '"c"', None),  # no claim with it: refused as before
    ]
    answers = await flux.d.complete_batch("w1", w.token, items)
    assert _kinds(answers) == [None, FailedPrecondition, FailedPrecondition]
    assert "stale generation 7" in str(answers[1]) and "claim it before completing" in str(answers[2])
    assert (flux.store.executions[a].state, flux.store.executions[a].output_json) == (COMPLETED, '"a"')
    assert (flux.state(b), flux.state(c)) == (SCHEDULED, SCHEDULED)
    # Claimed and finished as if the two calls had come one after the other.
    counters = flux.d.events.counters
    assert (counters.claimed, counters.completed) == (1, 1)
    assert flux.holdings("w1") == {b, c}


async def test_a_result_carrying_its_claim_is_accepted_again_once_claimed_or_recorded(flux):
    w, [a, b] = await _dispatched(flux, 2)
    flux.d.claim_batch("w1", w.token, [(a, 1)])  # claimed already: the claim inside is a retried one
    first = [Result(a, 1, '"a"', None, claim=True), Result(b, 1, '"b"', None, claim=True)]
    assert await flux.d.complete_batch("w1", w.token, first) == [None, None]
    # The answer lost, the worker sends the same again: the results recorded stand, once each.
    assert await flux.d.complete_batch("w1", w.token, first) == [None, None]
    assert [flux.store.executions[i].output_json for i in (a, b)] == ['"a"', '"b"']
    assert flux.d.events.counters.completed == 2
    # A different result for one recorded is still refused, claim or not.
    other = [Result(b, 1, '"other"', None, claim=True)]
    assert _kinds(await flux.d.complete_batch("w1", w.token, other)) == [FailedPrecondition]


def test_a_complete_item_carries_its_claim_from_the_wire():
    item = worker_pb2.CompleteItem(execution_id="a", generation=3, output_json="1", claim=True)
    assert worker_convert.result_from_proto(item, "items[0]") == Result("a", 3, "1", None, claim=True)
    item.claim = False
    assert worker_convert.result_from_proto(item, "items[0]").claim is False
