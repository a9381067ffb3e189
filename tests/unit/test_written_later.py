"""A run told of only by its final state, or by a receipt sent once it is written
(``submission.submit(written_later=True)``, what RunAndWaitStream asks when its receipt may wait):
queued before its row is written, on one server; written before any receipt says it exists."""

from __future__ import annotations

import asyncio

import pytest

from flux.dispatcher.reads import waiting
from flux.domain.execution import State
from tests.unit.harness import Flux, settled

CREATED, SCHEDULED, COMPLETED = State.CREATED, State.SCHEDULED, State.COMPLETED


async def _dispatched_unwritten(flux):
    """A worker and a run queued before its row is written, dispatched to it and not yet claimed."""
    await flux.workflow()
    w = await flux.worker()
    accepted = await flux.d.submit("job", '"in"', written_later=True)
    await settled()
    assert flux.state(accepted.execution_id) is SCHEDULED and accepted.execution_id in w.scheduled()
    return w, accepted


async def test_a_run_that_ends_before_its_receipt_is_due_is_written_once_with_its_final_state(flux):
    w, accepted = await _dispatched_unwritten(flux)  # dispatched at once
    execution_id = accepted.execution_id
    assert execution_id not in flux.store.executions and execution_id in flux.d.table.unwritten
    w.claim(execution_id)
    await w.complete(execution_id)
    stored = flux.store.executions[execution_id]
    assert (stored.state, stored.input_json) == (COMPLETED, '"in"')
    assert execution_id not in flux.d.table.unwritten


async def test_a_run_still_going_when_its_receipt_is_due_is_written_before_the_receipt(flux):
    await flux.workflow()  # no worker: it waits
    accepted = await flux.d.submit("job", '"in"', written_later=True)
    execution_id = accepted.execution_id
    stored_at_receipt: list[object] = []
    ending = asyncio.ensure_future(
        waiting.final_with_receipt(
            flux.d,
            execution_id,
            accepted,
            lambda: stored_at_receipt.append(flux.store.executions.get(execution_id)),
            0.01,
        )
    )
    for _ in range(200):  # bounded: until the receipt is sent
        if stored_at_receipt:
            break
        await asyncio.sleep(0.005)
    [row] = stored_at_receipt
    assert row is not None and (row.state, row.input_json) == (CREATED, '"in"')  # type: ignore[attr-defined]
    assert execution_id not in flux.d.table.unwritten
    await flux.d.cancel(execution_id)
    assert (await asyncio.wait_for(ending, 2)).state is State.CANCELLED


async def test_no_receipt_is_sent_for_a_run_the_store_would_not_write_its_final_state_answers(flux):
    await flux.workflow()
    accepted = await flux.d.submit("job", '"in"', written_later=True)
    execution_id = accepted.execution_id
    flux.store.fail_next_commit = OSError("disk full")
    receipts: list[None] = []
    ending = asyncio.ensure_future(
        waiting.final_with_receipt(flux.d, execution_id, accepted, lambda: receipts.append(None), 0.01)
    )
    await asyncio.sleep(0.05)
    assert not receipts and not ending.done() and execution_id not in flux.store.executions
    w = await flux.worker()
    w.claim(execution_id)
    await w.complete(execution_id)
    final = await asyncio.wait_for(ending, 2)
    assert final.state is COMPLETED and not receipts
    assert flux.store.executions[execution_id].state is COMPLETED


async def test_a_run_whose_caller_goes_away_before_it_is_told_is_written_and_goes_on(flux):
    await flux.workflow()
    accepted = await flux.d.submit("job", '"in"', written_later=True)
    execution_id = accepted.execution_id
    ending = asyncio.ensure_future(
        waiting.final_with_receipt(flux.d, execution_id, accepted, lambda: None, 10.0)
    )
    await settled()
    assert execution_id not in flux.store.executions
    ending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ending
    await settled()
    assert flux.store.executions[execution_id].state is CREATED
    assert execution_id not in flux.d.table.unwritten and execution_id in flux.d.queue


@pytest.mark.parametrize(
    ("input_json", "after"),
    [
        pytest.param('"' + "x" * (17 * 1024) + '"', False, id="an input only the store keeps"),
        pytest.param('"in"', True, id="a run that waits on dependencies"),
    ],
)
async def test_what_cannot_wait_for_its_write_is_written_first(flux, input_json, after):
    from flux.dispatcher.transitions.submission import NO_OVERRIDES

    await flux.workflow()
    overrides = NO_OVERRIDES
    if after:
        first = await flux.d.submit("job", '"first"')
        overrides = NO_OVERRIDES._replace(after=(first.execution_id,))
    accepted = await flux.d.submit("job", input_json, overrides=overrides, written_later=True)
    assert accepted.execution_id in flux.store.executions
    assert accepted.execution_id not in flux.d.table.unwritten


async def test_a_run_dispatched_and_unclaimed_when_written_comes_back_queued_after_a_restart(flux):
    _, accepted = await _dispatched_unwritten(flux)
    execution_id = accepted.execution_id
    receipts: list[None] = []
    ending = asyncio.ensure_future(
        waiting.final_with_receipt(flux.d, execution_id, accepted, lambda: receipts.append(None), 0.01)
    )
    for _ in range(200):  # bounded: until the receipt is sent
        if receipts:
            break
        await asyncio.sleep(0.005)
    assert receipts and flux.store.executions[execution_id].state is SCHEDULED
    ending.cancel()
    await flux.d.stop()
    again = await Flux(store=flux.store).start()  # a restart on what was stored
    try:
        assert again.state(execution_id) is CREATED and execution_id in again.d.queue
        assert again.get(execution_id).input_json == '"in"'
    finally:
        await again.d.stop()
