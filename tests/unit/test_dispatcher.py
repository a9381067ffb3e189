"""The dispatcher (DESIGN §3-§4) with an in-memory store, fake sessions and a hand-driven clock
(the harness in tests/unit/harness.py).

No processes, no network, no sleeping: the housekeeping task is stopped and
tests run its step, ``housekeeping.expire``, themselves after moving the clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import pytest

from flux.dispatcher.core import WorkerRegistration
from flux.dispatcher.state.session import Scheduled, Stop
from flux.dispatcher.transitions import attempts, housekeeping
from flux.domain.execution import ExecutionError, State, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.domain.workflow import WorkflowRecord
from flux.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from flux.matching import Amounts
from tests.unit.fleet import GiB
from tests.unit.harness import ACK, GRACE, SETTINGS, Clock, Flux, Worker, committed, resources, settled
from tests.unit.memory_store import MemoryStore

pytestmark = pytest.mark.timeout(10)

CREATED, SCHEDULED, RUNNING = State.CREATED, State.SCHEDULED, State.RUNNING
COMPLETED, FAILED, CANCELLED = State.COMPLETED, State.FAILED, State.CANCELLED


# ---- submit -------------------------------------------------------------------------------------


async def test_submit_is_durable_before_it_returns_and_dispatched_at_once(flux):
    record = await flux.workflow(cpu=1, gpu=1)
    w = await flux.worker(gpus=2)
    execution = await flux.d.submit("job", '{"x": 1}')
    # Committed, not merely queued: the batch commits only on a later loop iteration.
    assert flux.store.executions[execution.execution_id].state is CREATED
    assert (execution.state, execution.worker, execution.generation) == (SCHEDULED, "w1", 1)
    [event] = w.events()
    assert isinstance(event, Scheduled)
    sent = event.execution
    assert sent.execution_id == execution.execution_id
    assert (sent.attempt, sent.generation, sent.input_json) == (1, 1, '{"x": 1}')
    assert sent.workflow == WorkflowRef("job", 1, record.source_hash, "main")
    assert sent.gpu_indices == (0,)
    assert event.requests == ResourceRequest(cpu=1, gpu=1)


async def test_submit_without_input_stores_null(flux):
    await flux.workflow()
    assert flux.get(await flux.run()).input_json == "null"


async def test_submit_that_cannot_be_stored_is_refused_and_not_queued(flux):
    await flux.workflow()
    w = await flux.worker()
    flux.store.fail_next_commit = OSError("disk full")
    with pytest.raises(Unavailable, match="disk full"):
        await flux.d.submit("job")
    assert len(flux.d.pending()) == 0
    assert flux.d.table.unfinished == {}
    assert w.events() == []


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({"workflow_name": "nope"}, NotFound, "'nope' is not registered", id="unknown workflow"),
        pytest.param({"input_json": "{oops"}, InvalidArgument, "input_json", id="input not JSON"),
        pytest.param({"version": 7}, NotFound, "no version 7; the latest is 1", id="unknown version"),
        pytest.param({"version": -1}, InvalidArgument, "version must be >= 0", id="negative version"),
    ],
)
async def test_submit_refusals(flux, kwargs, error, match):
    await flux.workflow()
    await flux.worker()
    with pytest.raises(error, match=match):
        await flux.d.submit(**{"workflow_name": "job", **kwargs})
    await committed()
    assert flux.store.executions == {}
    assert len(flux.d.pending()) == 0


async def test_submit_pins_a_version_or_takes_the_latest(flux):
    await flux.workflow()
    await flux.workflow(cpu=1)  # other metadata: a new version (the same again would be idempotent)
    latest = await flux.d.submit("job")
    pinned = await flux.d.submit("job", version=1)
    assert (latest.workflow.version, pinned.workflow.version) == (2, 1)


async def test_registering_the_same_definition_again_returns_the_latest_version(flux):
    first = await flux.workflow(cpu=2)
    again = await flux.workflow(cpu=2)
    assert (first.version, first.unchanged, again.version, again.unchanged) == (1, False, 1, True)
    changed = await flux.workflow(cpu=3)
    assert (changed.version, changed.unchanged) == (2, False)
    back = await flux.workflow(cpu=2)  # compared with the latest, so a new version again
    assert (back.version, back.unchanged) == (3, False)
    assert sorted(v for name, v in flux.store.workflows if name == "job") == [1, 2, 3]
    assert (await flux.d.submit("job")).workflow.version == 3


# ---- where work goes ----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["registered, never connected", "stream dropped", "draining"])
async def test_nothing_is_dispatched_to_a_worker_that_cannot_take_it(flux, how):
    await flux.workflow()
    w = await flux.worker(connect=how != "registered, never connected")
    if how == "stream dropped":
        w.disconnect()
    elif how == "draining":
        w.report(resources(), draining=True)
    execution_id = await flux.run()
    assert flux.state(execution_id) is CREATED
    assert execution_id in flux.d.pending()
    assert flux.holdings("w1") == set()
    assert w.scheduled() == []


async def _register_only(flux):
    return await flux.worker(cpu=2, connect=False), None


async def _connect(flux, w, blocker):
    w.connect()


async def _busy_observed(flux):
    return await flux.worker(cpu=2, cpu_available=0), None


async def _report_free(flux, w, blocker):
    w.report(resources(cpu=2))


async def _draining(flux):
    w = await flux.worker(cpu=2)
    w.report(resources(cpu=2), draining=True)
    return w, None


async def _report_not_draining(flux, w, blocker):
    w.report(resources(cpu=2))


async def _running_blocker(flux):
    w = await flux.worker(cpu=2)
    blocker = await flux.run()
    w.claim(blocker)
    w.events()
    return w, blocker


async def _complete(flux, w, blocker):
    await w.complete(blocker)


async def _cancel(flux, w, blocker):
    await flux.d.cancel(blocker)


Setup = Callable[["Flux"], Awaitable[tuple[Worker, str | None]]]
Trigger = Callable[["Flux", Worker, str | None], Awaitable[None]]


@pytest.mark.parametrize(
    ("setup", "trigger"),
    [
        pytest.param(_register_only, _connect, id="worker connects"),
        pytest.param(_busy_observed, _report_free, id="report shows free cores"),
        pytest.param(_draining, _report_not_draining, id="report ends draining"),
        pytest.param(_running_blocker, _complete, id="completion frees the cores"),
        pytest.param(_running_blocker, _cancel, id="cancel frees the cores"),
    ],
)
async def test_pending_work_is_dispatched_when_room_appears(flux, setup: Setup, trigger: Trigger):
    await flux.workflow(cpu=2)
    w, blocker = await setup(flux)
    waiting = await flux.run()
    assert flux.state(waiting) is CREATED
    await trigger(flux, w, blocker)
    assert flux.state(waiting) is SCHEDULED
    assert w.scheduled() == [waiting]


async def test_no_overcommit_and_each_completion_dispatches_exactly_one_more(flux):
    await flux.workflow(cpu=2)
    w = await flux.worker(cpu=4)
    ids = [await flux.run() for _ in range(10)]
    assert [flux.state(i) for i in ids] == [SCHEDULED] * 2 + [CREATED] * 8
    assert w.scheduled() == ids[:2]
    # A report taken before they started still shows 4 idle cores; the reservations cap it.
    w.report(resources(cpu=4))
    assert w.scheduled() == []
    w.claim(ids[0])
    await w.complete(ids[0])
    assert w.scheduled() == [ids[2]]
    assert [flux.state(i) for i in ids[1:]] == [SCHEDULED] * 2 + [CREATED] * 7
    assert flux.d.registry.entries["w1"].reserved == Amounts(cpu=4)


@pytest.mark.parametrize(
    ("fleet", "expected"),
    [
        pytest.param(
            [{"name": "a"}, {"name": "b"}],
            ["a", "b", "a", "b"],
            id="equal workers alternate, name breaks ties",
        ),
        pytest.param(
            [{"name": "a", "capacity": 2}, {"name": "b", "capacity": 8}],
            ["a", "b", "b", "b"],
            id="fewest active per capacity wins",
        ),
        pytest.param(
            [{"name": "a", "cpu_available": 1}, {"name": "b"}],
            ["b", "a", "b"],
            id="more free cpu breaks a load tie",
        ),
    ],
)
async def test_least_loaded_worker_is_chosen(flux, fleet, expected):
    await flux.workflow(cpu=1)
    for spec in fleet:
        await flux.worker(**spec)
    ids = [await flux.run() for _ in expected]
    assert [flux.get(i).worker for i in ids] == expected


async def test_gpu_indices_are_distinct_and_released_on_completion(flux):
    await flux.workflow(gpu=1)
    w = await flux.worker(gpus=2)
    a, b, c = [await flux.run() for _ in range(3)]
    assert {flux.get(a).gpu_indices, flux.get(b).gpu_indices} == {(0,), (1,)}
    assert flux.state(c) is CREATED
    freed = flux.get(a).gpu_indices
    w.claim(a)
    await w.complete(a)
    assert flux.get(c).gpu_indices == freed
    assert flux.d.registry.entries["w1"].held_gpus == {0, 1}


async def test_gpu_without_free_vram_is_not_assigned(flux):
    await flux.workflow(gpu=1)
    w = await flux.worker(gpus=2)
    gpus = (Gpu(0, memory_total=GiB, memory_free=0), Gpu(1, memory_total=GiB, memory_free=GiB))
    w.report(WorkerResources(4, 4, 16 * GiB, 16 * GiB, 100 * GiB, 100 * GiB, gpus))
    a, b = await flux.run(), await flux.run()
    assert flux.get(a).gpu_indices == (1,)
    assert flux.state(b) is CREATED


async def test_affinity_sends_work_only_to_matching_labels(flux):
    await flux.workflow(affinity={"role": "training"})
    await flux.worker("a", labels={"role": "serving"})
    await flux.worker("b", labels={"role": "training", "zone": "x"})
    assert [flux.get(await flux.run()).worker for _ in range(2)] == ["b", "b"]


# ---- ack deadline and fencing --------------------------------------------------------------------


async def test_unclaimed_dispatch_returns_to_created_after_the_ack_deadline(flux):
    await flux.workflow(cpu=4)
    w = await flux.worker(cpu=4)
    execution_id = await flux.run()
    w.events()
    assert flux.expire(ACK - 0.01) is False
    assert flux.state(execution_id) is SCHEDULED

    assert flux.expire(0.01) is True
    back = flux.get(execution_id)
    assert (back.state, back.attempt, back.worker, back.generation) == (CREATED, 1, "", 1)
    # Back in line only once the row is stored with the ended dispatch's generation: one
    # server does not write dispatches, and a restart may skip past one unwritten, not two.
    assert execution_id not in flux.d.pending()
    assert w.events() == [Stop(execution_id, 1, "ack deadline expired")]
    entry = flux.d.registry.entries["w1"]
    assert (entry.holdings, entry.reserved) == ({}, Amounts())
    with pytest.raises(FailedPrecondition, match="not dispatched to worker 'w1'"):
        w.claim(execution_id, generation=1)
    await committed()
    assert flux.store.executions[execution_id].state is CREATED

    # Once stored, the pass its return starts dispatches it again under a new generation; the
    # old one stays fenced.
    await settled()
    assert (flux.state(execution_id), w.generation(execution_id)) == (SCHEDULED, 2)
    with pytest.raises(FailedPrecondition, match="stale generation 1"):
        w.claim(execution_id, generation=1)
    assert w.claim(execution_id, generation=2).state is RUNNING
    # Claimed work has no ack deadline.
    assert flux.expire(ACK * 10) is False
    assert flux.state(execution_id) is RUNNING


async def _claim(d, name, token, execution_id, generation):
    return d.claim(name, token, execution_id, generation)


async def _complete_call(d, name, token, execution_id, generation):
    return await d.complete(name, token, execution_id, generation, "null", None)


async def _release(d, name, token, execution_id, generation):
    return d.release(name, token, execution_id, generation, "test")


@pytest.mark.parametrize("call", [_claim, _complete_call, _release], ids=["claim", "complete", "release"])
@pytest.mark.parametrize(
    ("who", "generation", "error", "match"),
    [
        pytest.param("a", 1, FailedPrecondition, "stale generation 1", id="stale generation"),
        pytest.param("a", 3, FailedPrecondition, "stale generation 3", id="future generation"),
        pytest.param("b", 2, FailedPrecondition, "not dispatched to worker 'b'", id="wrong worker"),
        pytest.param("a-forged", 2, PermissionDenied, "session_token does not match", id="wrong token"),
        pytest.param("ghost", 2, NotFound, "'ghost' is not registered", id="unknown worker"),
    ],
)
async def test_fencing_refuses_the_wrong_dispatch(flux, call, who, generation, error, match):
    await flux.workflow(cpu=4)
    a = await flux.worker("a")
    b = await flux.worker("b")
    execution_id = await flux.run()
    flux.expire(ACK)
    await settled()  # the requeued row is stored, and back in line
    flux.d.place()  # the second dispatch: generation 2, to "a" again (name breaks the tie)
    before = flux.get(execution_id)
    assert (before.worker, before.generation) == ("a", 2)
    a.claim(execution_id)
    before = flux.get(execution_id)
    name, token = {
        "a": ("a", a.token),
        "b": ("b", b.token),
        "a-forged": ("a", "forged"),
        "ghost": ("ghost", a.token),
    }[who]
    with pytest.raises(error, match=match):
        await call(flux.d, name, token, execution_id, generation)
    assert flux.get(execution_id) == before
    assert flux.holdings("a") == {execution_id}


async def test_complete_before_claim_is_refused(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    with pytest.raises(FailedPrecondition, match="claim it before completing"):
        await w.complete(execution_id)
    assert flux.state(execution_id) is SCHEDULED


async def test_claim_is_idempotent(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    first = w.claim(execution_id)
    assert w.claim(execution_id) == first
    await committed()
    assert flux.store.executions[execution_id].state is RUNNING


async def test_complete_with_invalid_output_is_refused_and_keeps_running(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    w.claim(execution_id)
    with pytest.raises(InvalidArgument, match="output_json"):
        await w.complete(execution_id, "{oops")
    assert flux.state(execution_id) is RUNNING


@pytest.mark.parametrize(
    ("first", "again", "accepted"),
    [
        pytest.param(('{"v": 1}', None), ('{"v": 1}', None), True, id="same output retried"),
        pytest.param((None, None), ("null", None), True, id="empty output is null"),
        pytest.param(
            (None, ExecutionError("ValueError", "bad")),
            (None, ExecutionError("ValueError", "bad")),
            True,
            id="same error retried",
        ),
        pytest.param(('{"v": 1}', None), ('{"v": 2}', None), False, id="different output"),
        pytest.param(
            ('{"v": 1}', None), (None, ExecutionError("ValueError", "bad")), False, id="error after output"
        ),
        pytest.param(
            (None, ExecutionError("ValueError", "bad")), ('{"v": 1}', None), False, id="output after error"
        ),
    ],
)
async def test_a_result_is_recorded_once(flux, first, again, accepted):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    generation = w.claim(execution_id).generation
    recorded = await w.complete(execution_id, *first)
    assert recorded.state is (FAILED if first[1] else COMPLETED)
    if accepted:
        assert await w.complete(execution_id, *again, generation=generation) == recorded
    else:
        with pytest.raises(FailedPrecondition, match="already"):
            await w.complete(execution_id, *again, generation=generation)
    assert flux.store.executions[execution_id] == recorded
    assert await flux.d.get(execution_id) == recorded


async def test_a_result_whose_commit_failed_is_stored_by_the_retry(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    w.claim(execution_id)
    await committed()
    flux.store.fail_next_commit = OSError("disk full")
    with pytest.raises(Unavailable, match="disk full"):
        await w.complete(execution_id, '"done"', generation=1)
    assert flux.store.executions[execution_id].state is RUNNING
    retried = await w.complete(execution_id, '"done"', generation=1)  # the worker retries on Unavailable
    assert (retried.state, retried.output_json) == (COMPLETED, '"done"')
    assert flux.store.executions[execution_id] == retried


async def test_a_result_whose_commit_failed_is_stored_by_the_tick_when_its_worker_never_retries(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    w.claim(execution_id)
    await committed()
    flux.store.fail_next_commit = OSError("disk full")
    with pytest.raises(Unavailable, match="disk full"):
        await w.complete(execution_id, '"done"', generation=1)
    # Hidden until stored: callers see RUNNING, as the store does.
    assert (await flux.d.get(execution_id)).state is RUNNING
    w.disconnect()  # the worker dies: nobody retries
    await flux.tick()
    assert (flux.store.executions[execution_id].state, flux.store.executions[execution_id].output_json) == (
        COMPLETED,
        '"done"',
    )
    assert (await flux.d.get(execution_id)).state is COMPLETED
    assert flux.d.table.unsaved == set() and flux.d.table.uncommitted == {}


async def test_a_failed_write_of_a_live_state_is_written_again_until_it_lands(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    await committed()
    flux.store.fail_next_commit = OSError("database restarting")
    w.claim(execution_id)  # the RUNNING write fails
    await settled()
    assert flux.store.executions[execution_id].state is CREATED
    flux.store.fail_next_commit = OSError("still restarting")
    await flux.tick()
    assert flux.store.executions[execution_id].state is CREATED and flux.d.table.unsaved == {execution_id}
    await flux.tick()
    assert flux.store.executions[execution_id].state is RUNNING
    assert flux.d.table.unsaved == set()


async def test_a_completion_for_an_older_generation_is_refused_after_the_result(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    w.claim(execution_id)
    recorded = await w.complete(execution_id, '"first"')
    with pytest.raises(FailedPrecondition, match="already COMPLETED"):
        await w.complete(execution_id, '"first"', generation=recorded.generation - 1)


# ---- release -------------------------------------------------------------------------------------


async def test_release_requeues_with_the_same_attempt_in_its_original_place(flux):
    await flux.workflow(cpu=2)
    w = await flux.worker(cpu=2)
    first, second = await flux.run(), await flux.run()
    w.claim(first)
    w.report(resources(cpu=2), draining=True)
    released = w.release(first)
    assert (released.state, released.attempt, released.worker) == (CREATED, 1, "")
    assert released.seq == 1
    await settled()  # back in line once stored
    shape = flux.d.catalogue.shape_of(flux.d.table.unfinished[first])
    assert [p.execution_id for p in flux.d.pending().iter_shape(shape)] == [first, second]
    assert flux.holdings("w1") == set()
    v = await flux.worker("v", cpu=2)
    assert v.scheduled() == [first]
    assert (flux.get(first).worker, flux.get(first).generation) == ("v", 2)
    assert flux.state(second) is CREATED


async def test_release_of_finished_work_is_refused(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    generation = w.claim(execution_id).generation
    await w.complete(execution_id)
    with pytest.raises(FailedPrecondition, match="already COMPLETED"):
        w.release(execution_id, generation)


# ---- cancel --------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [CREATED, SCHEDULED, RUNNING], ids=lambda s: s.label)
async def test_cancel_unfinished(flux, state):
    await flux.workflow(cpu=4)
    w = await flux.worker(cpu=4, connect=state is not CREATED)
    execution_id = await flux.run()
    waiting = await flux.run()
    if state is RUNNING:
        w.claim(execution_id)
    generation = flux.get(execution_id).generation
    w.events()
    assert flux.state(execution_id) is state

    cancelled = await flux.d.cancel(execution_id)
    assert cancelled.state is CANCELLED
    assert flux.store.executions[execution_id].state is CANCELLED  # durable before it returns
    assert execution_id not in flux.d.pending()
    assert execution_id not in flux.holdings("w1")
    if state is CREATED:
        assert w.events() == []
        assert flux.state(waiting) is CREATED
    else:
        events = w.events()
        assert events[0] == Stop(execution_id, generation, "cancelled by a client")
        # Its reservation is gone, so the next execution takes the cores.
        assert [e.execution.execution_id for e in events[1:] if isinstance(e, Scheduled)] == [waiting]
        with pytest.raises(FailedPrecondition, match="already CANCELLED"):
            w.claim(execution_id, generation)


async def test_cancel_of_completed_work_is_refused(flux):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    w.claim(execution_id)
    await w.complete(execution_id)
    with pytest.raises(FailedPrecondition, match="already COMPLETED"):
        await flux.d.cancel(execution_id)


async def test_cancel_is_idempotent_and_a_retry_stores_it_again(flux):
    await flux.workflow()
    execution_id = await flux.run()
    flux.store.fail_next_commit = OSError("disk full")
    with pytest.raises(Unavailable, match="disk full"):
        await flux.d.cancel(execution_id)
    again = await flux.d.cancel(execution_id)
    assert again.state is CANCELLED
    assert flux.store.executions[execution_id].state is CANCELLED


async def test_cancel_or_get_of_unknown_execution(flux):
    with pytest.raises(NotFound):
        await flux.d.cancel("missing")
    with pytest.raises(InvalidArgument, match="execution_id"):
        await flux.d.get("")


# ---- lost workers --------------------------------------------------------------------------------


async def test_lost_worker_requeues_running_with_next_attempt_and_scheduled_with_the_same(flux):
    await flux.workflow(cpu=1)
    w = await flux.worker()
    running, scheduled = await flux.run(), await flux.run()
    w.claim(running)
    w.disconnect()
    assert flux.expire(GRACE - 0.01) is False
    assert flux.holdings("w1") == {running, scheduled}
    assert flux.expire(0.01) is True
    assert (flux.state(running), flux.get(running).attempt) == (CREATED, 2)
    assert (flux.state(scheduled), flux.get(scheduled).attempt) == (CREATED, 1)
    assert "w1" not in {entry.name for entry in flux.d.local_workers()}
    assert [flux.get(i).worker for i in (running, scheduled)] == ["", ""]
    await committed()
    assert flux.store.executions[running].attempt == 2


@pytest.mark.parametrize("max_attempts", [1, 2, 3])
async def test_lost_running_work_retries_until_max_attempts_then_fails(flux, max_attempts):
    await flux.workflow(max_attempts=max_attempts)
    execution_id = await flux.run()
    for attempt in range(1, max_attempts + 1):
        w = await flux.worker(f"w{attempt}")
        assert (flux.state(execution_id), flux.get(execution_id).attempt) == (SCHEDULED, attempt)
        w.claim(execution_id)
        w.disconnect()
        flux.expire(GRACE)
        await settled()
    final = flux.get(execution_id)
    assert (final.state, final.attempt) == (FAILED, max_attempts)
    assert final.error is not None and final.error.type == "WorkerLost"
    assert execution_id not in flux.d.pending()
    await committed()
    assert flux.store.executions[execution_id].state is FAILED


async def test_reconnect_within_the_grace_period_keeps_the_work(flux):
    await flux.workflow()
    w = await flux.worker()
    running, scheduled = await flux.run(), await flux.run()
    w.claim(running)
    w.disconnect()
    flux.expire(GRACE - 0.01)
    session = w.connect()
    assert session.held == {running: flux.get(running).generation, scheduled: flux.get(scheduled).generation}
    # Long past the grace period counted from the drop, still before the ack deadline.
    assert flux.expire(ACK - GRACE) is False
    assert flux.get(running).state is RUNNING and flux.get(running).attempt == 1
    assert (await w.complete(running)).state is COMPLETED


async def test_a_late_result_from_a_lost_worker_is_refused(flux):
    await flux.workflow(max_attempts=1)
    w = await flux.worker()
    execution_id = await flux.run()
    generation = w.claim(execution_id).generation
    w.disconnect()
    flux.expire(GRACE)
    assert flux.state(execution_id) is FAILED
    with pytest.raises(NotFound, match="not registered"):
        await w.complete(execution_id, '"late"', generation=generation)
    # The same process registers again (its old token is gone with the entry) and retries.
    back = await flux.worker()
    with pytest.raises(FailedPrecondition, match="already FAILED"):
        await back.complete(execution_id, '"late"', generation=generation)
    assert flux.get(execution_id).error.type == "WorkerLost"


# ---- worker registration -------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["", "someone-elses"], ids=["no token", "other token"])
async def test_register_a_live_name_is_refused(flux, token):
    w = await flux.worker()
    registration = WorkerRegistration("w1", resources(), WorkerSoftware(), {}, session_token=token)
    with pytest.raises(AlreadyExists, match="'w1' is held by a live stream"):
        await flux.d.register_worker(registration)
    assert flux.d.registry.entries["w1"].session_token == w.token


async def test_register_with_own_token_keeps_identity_and_holdings(flux):
    await flux.workflow()
    w = await flux.worker(labels={"role": "a"})
    execution_id = await flux.run()
    w.claim(execution_id)
    registration = WorkerRegistration(
        "w1", resources(cpu=8), WorkerSoftware(), {"role": "b"}, 4, session_token=w.token
    )
    assert await flux.d.register_worker(registration) == w.token
    entry = flux.d.registry.entries["w1"]
    assert set(entry.holdings) == {execution_id}
    assert (dict(entry.labels), entry.capacity, entry.resources.cpu_total) == ({"role": "b"}, 4, 8)
    assert w.connect().held == {execution_id: flux.get(execution_id).generation}
    assert flux.state(execution_id) is RUNNING


async def test_a_dropped_name_stays_its_workers_for_the_grace_period(flux):
    await flux.workflow(cpu=4)
    old = await flux.worker("w1")
    running = await flux.run(input_json='{"secret": 1}')
    old.claim(running)
    old.disconnect()
    other = await flux.worker("other")
    # Another process with the worker token but not the session token: refused, and nothing moves.
    flux.clock.advance(GRACE - 1)
    with pytest.raises(AlreadyExists, match=r"until 1970-01-01T00:16:45Z.*'flux worker forget w1'"):
        await flux.worker("w1", connect=False)
    assert flux.holdings("w1") == {running} and other.scheduled() == []
    assert (flux.get(running).state, flux.get(running).worker) == (RUNNING, "w1")
    # The real worker comes back with its token and finishes its work.
    old.connect()
    done = await old.complete(running, '"mine"')
    assert (done.state, done.output_json) == (COMPLETED, '"mine"')


async def test_a_dropped_name_is_free_once_its_grace_period_ends(flux):
    await flux.workflow(cpu=4)
    old = await flux.worker("w1")
    running = await flux.run()
    old.claim(running)
    old.disconnect()
    other = await flux.worker("other")
    flux.clock.advance(GRACE)  # ended, though the housekeeper has not run yet
    new = await flux.worker("w1", connect=False)
    assert new.token != old.token and flux.holdings("w1") == set()
    await settled()  # the requeued row is stored, then dispatched again
    moved = flux.get(running)
    assert (moved.state, moved.attempt, moved.worker) == (SCHEDULED, 2, "other")
    assert other.scheduled() == [running]
    with pytest.raises(PermissionDenied):
        old.connect()


async def test_forget_drops_a_worker_now_and_requeues_its_work(flux):
    await flux.workflow(cpu=4)
    old = await flux.worker("w1")
    running = await flux.run()
    old.claim(running)
    old.disconnect()
    await flux.worker("other")
    assert await flux.d.forget_worker("w1") == 1
    await settled()
    moved = flux.get(running)
    assert (moved.state, moved.attempt, moved.worker) == (SCHEDULED, 2, "other")
    new = await flux.worker("w1", connect=False)
    assert new.token != old.token
    with pytest.raises(NotFound, match="'nobody' is not registered"):
        await flux.d.forget_worker("nobody")


async def test_forgetting_a_connected_worker_closes_its_stream(flux):
    await flux.workflow()
    w = await flux.worker("w1")
    execution_id = await flux.run()
    assert await flux.d.forget_worker("w1") == 1
    assert w.session is not None and w.session.closed
    assert flux.state(execution_id) is CREATED
    with pytest.raises(NotFound):
        w.connect()


def _gpu(index: int, free: int = GiB) -> Gpu:
    return Gpu(index, memory_total=GiB, memory_free=free)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        pytest.param({"name": ""}, "name", id="empty name"),
        pytest.param({"name": "has space"}, "name", id="name with a space"),
        pytest.param({"name": "-leading-dash"}, "name", id="name starting with a dash"),
        pytest.param({"name": "x" * 64}, "name", id="name too long"),
        pytest.param({"capacity": -1}, "capacity", id="negative capacity"),
        pytest.param({"capacity": 4097}, "capacity", id="capacity too large"),
        pytest.param({"labels": {"bad key!": "x"}}, "labels key", id="bad label key"),
        pytest.param({"labels": {"role": "-x"}}, "labels\\['role'\\]", id="bad label value"),
        pytest.param({"resources": WorkerResources(cpu_total=-1)}, "resources.cpu_total", id="negative cpu"),
        pytest.param(
            {"resources": WorkerResources(memory_available=-1)},
            "resources.memory_available",
            id="negative memory",
        ),
        pytest.param(
            {"resources": WorkerResources(gpus=(_gpu(0), _gpu(0)))}, "resources.gpus", id="duplicate gpu"
        ),
        pytest.param(
            {"resources": WorkerResources(gpus=(_gpu(0, -1),))}, "resources.gpus", id="negative gpu memory"
        ),
    ],
)
async def test_register_refuses_invalid_fields(flux, changes, field):
    registration = {
        "name": "w1",
        "resources": resources(),
        "software": WorkerSoftware(),
        "labels": {},
        "capacity": 0,
        **changes,
    }
    with pytest.raises(InvalidArgument, match=f"^{field}"):
        await flux.d.register_worker(WorkerRegistration(**registration))
    assert flux.d.registry.entries == {}
    assert flux.store.workers == {}


async def test_register_defaults_capacity_and_remembers_the_token(flux):
    w = await flux.worker(connect=False)
    assert flux.d.registry.entries["w1"].capacity == 16
    assert flux.store.workers["w1"].session_token == w.token


async def test_report_with_negative_resources_is_refused(flux):
    w = await flux.worker()
    with pytest.raises(InvalidArgument, match="resources.cpu_available"):
        w.report(WorkerResources(cpu_total=4, cpu_available=-1))
    assert flux.d.registry.entries["w1"].resources == resources()


@pytest.mark.parametrize(
    ("name", "token", "error"),
    [
        pytest.param("w1", "wrong", PermissionDenied, id="wrong token"),
        pytest.param("w1", "", PermissionDenied, id="no token"),
        pytest.param("ghost", None, NotFound, id="unknown worker"),
    ],
)
async def test_connect_refusals(flux, name, token, error):
    w = await flux.worker(connect=False)
    with pytest.raises(error):
        flux.d.connect(name, w.token if token is None else token)
    assert not flux.d.registry.entries["w1"].connected


async def test_a_worker_reconnecting_replaces_its_own_stream(flux):
    await flux.workflow()
    w = await flux.worker()
    first = w.session
    second = w.connect()
    assert first is not None and first.closed and not second.closed
    flux.d.disconnect(first)  # the old stream's transport cleaning up must not drop the new one
    assert flux.d.registry.entries["w1"].connected
    assert flux.get(await flux.run()).worker == "w1"


async def test_a_worker_registered_but_never_connected_is_forgotten_after_grace(flux):
    await flux.worker(connect=False)
    flux.expire(GRACE)
    assert flux.d.local_workers() == []


# ---- why -----------------------------------------------------------------------------------------


async def test_why_pending_infeasible(flux):
    await flux.workflow(cpu=8)
    await flux.worker(cpu=4)
    execution_id = await flux.run()
    why = await flux.d.why(execution_id)
    assert why.summary == "0/1 workers can run it: 1 has only 4 cores"
    assert why.explanation is not None and why.explanation.infeasible
    assert why.queue_position == 0


async def test_why_pending_busy(flux):
    await flux.workflow(cpu=4)
    w = await flux.worker(cpu=4)
    running, first, second = [await flux.run() for _ in range(3)]
    w.claim(running)
    why = await flux.d.why(second)
    assert why.summary == "0/1 workers can run it: 1 has 0 of 4 cores free"
    assert why.explanation is not None and not why.explanation.infeasible
    assert why.queue_position == 1


async def test_why_with_no_worker_connected(flux):
    await flux.workflow()
    await flux.worker(connect=False)
    why = await flux.d.why(await flux.run())
    assert why.summary == "0/0 workers can run it: no worker is connected"
    assert why.explanation is not None and why.explanation.infeasible


@pytest.mark.parametrize(
    ("state", "summary"),
    [
        pytest.param(SCHEDULED, "execution is SCHEDULED on worker w1", id="scheduled"),
        pytest.param(RUNNING, "execution is RUNNING on worker w1", id="running"),
        pytest.param(COMPLETED, "execution is COMPLETED on worker w1", id="completed"),
    ],
)
async def test_why_placed(flux, state, summary):
    await flux.workflow()
    w = await flux.worker()
    execution_id = await flux.run()
    if state is not SCHEDULED:
        w.claim(execution_id)
    if state is COMPLETED:
        await w.complete(execution_id)
    why = await flux.d.why(execution_id)
    assert (why.summary, why.explanation, why.execution.state) == (summary, None, state)


# ---- restart -------------------------------------------------------------------------------------


@pytest.mark.parametrize("worker_returns", [True, False], ids=["worker reconnects", "worker never returns"])
async def test_restart_recovers_queue_and_running_work(worker_returns):
    store, clock = MemoryStore(), Clock()
    one = await Flux(store, clock).start()
    await one.workflow(cpu=1)
    w = await one.worker(cpu=1)
    running, queued = await one.run(), await one.run()
    w.claim(running)
    assert one.state(queued) is CREATED
    await one.d.stop()

    two = await Flux(store, clock).start()
    try:
        assert two.state(queued) is CREATED
        assert queued in two.d.pending()
        recovered = two.get(running)
        assert (recovered.state, recovered.worker, recovered.generation) == (RUNNING, "w1", 1)
        assert two.holdings("w1") == {running}
        assert not two.d.registry.entries["w1"].connected
        assert (await two.d.submit("job")).seq == 3  # submission order continues

        if worker_returns:
            clock.advance(GRACE - 0.01)
            registration = WorkerRegistration(
                "w1", resources(cpu=1), WorkerSoftware(), {}, session_token=w.token
            )
            assert await two.d.register_worker(registration) == w.token  # the token survived
            w.d = two.d
            assert w.connect().held == {running: 1}
            assert two.expire(GRACE * 10) is False
            assert two.state(running) is RUNNING
            assert (await w.complete(running, '"ok"', generation=1)).state is COMPLETED
            assert w.scheduled() == [queued]  # FIFO: the older queued one first
        else:
            assert two.expire(GRACE - 0.01) is False
            assert two.state(running) is RUNNING
            assert two.expire(0.01) is True
            back = two.get(running)
            assert (back.state, back.attempt, back.worker) == (CREATED, 2, "")
            await settled()
            other = await two.worker("other", cpu=1)
            assert other.scheduled() == [running]  # it keeps its place ahead of later work
    finally:
        await two.d.stop()


async def test_restart_forgets_unclaimed_dispatches(flux):
    await flux.workflow()
    await flux.worker()
    execution_id = await flux.run()
    assert flux.state(execution_id) is SCHEDULED
    await flux.d.stop()
    again = await Flux(flux.store, flux.clock).start()
    try:
        assert again.state(execution_id) is CREATED
        assert execution_id in again.d.pending()
        assert again.d.local_workers() == []
    finally:
        await again.d.stop()


async def test_restarts_in_a_row_never_dispatch_one_generation_twice(flux):
    # One server does not write dispatches. Each restart skips past the one an unclaimed
    # dispatch may have used, and stores the skip before dispatching: otherwise a second
    # restart skips from the same stored generation and hands the same one out again.
    await flux.workflow()
    await flux.worker("w0")
    execution_id = await flux.run()
    dispatched = [flux.get(execution_id).generation]
    server = flux
    for restart in range(1, 4):
        await server.d.stop()
        server = await Flux(flux.store, flux.clock).start()
        assert flux.store.executions[execution_id].generation == dispatched[-1]
        await server.worker(f"w{restart}")
        assert server.state(execution_id) is SCHEDULED
        dispatched.append(server.get(execution_id).generation)
    await server.d.stop()
    assert dispatched == [1, 2, 3, 4]


async def test_a_restart_that_cannot_store_its_generation_skip_refuses_to_start(flux):
    await flux.workflow()
    await flux.worker("w0")
    execution_id = await flux.run()
    await flux.d.stop()
    flux.store.fail_next_commit = OSError("disk full")
    with pytest.raises(Unavailable, match="could not store the recovered executions: disk full"):
        await Flux(flux.store, flux.clock).start()
    assert flux.store.executions[execution_id].generation == 0  # nothing dispatched, nothing stored
    again = await Flux(flux.store, flux.clock).start()
    try:
        assert flux.store.executions[execution_id].generation == 1
        await again.worker("w1")
        assert again.get(execution_id).generation == 2
    finally:
        await again.d.stop()


async def test_a_requeued_row_whose_write_fails_is_queued_once_a_retry_stores_it(flux, monkeypatch):
    monkeypatch.setattr(attempts, "REQUEUE_RETRY", 0.0)  # requeue_saved lives with the retries
    await flux.workflow(cpu=4)
    w = await flux.worker(cpu=4)
    execution_id = await flux.run()
    w.events()
    flux.store.fail_next_commit = OSError("disk full")
    assert flux.expire(ACK) is True
    await committed()  # the failed write
    assert execution_id not in flux.d.pending() and flux.store.executions[execution_id].generation == 0
    await settled()  # the retry and its write
    await settled()  # and the pass its return starts
    assert flux.store.executions[execution_id].generation == 1
    assert (flux.state(execution_id), w.generation(execution_id)) == (SCHEDULED, 2)


# ---- watch ---------------------------------------------------------------------------------------


async def _follow(flux: Flux, execution_id: str, seen: list[State]) -> asyncio.Task[None]:
    async def follow() -> None:
        async for execution in flux.d.watch(execution_id):
            seen.append(execution.state)

    task = asyncio.create_task(follow())
    for _ in range(100):  # bounded: until it has subscribed and yielded the current state
        if seen:
            return task
        await asyncio.sleep(0)
    raise AssertionError("watch did not yield the current state")


async def _complete_it(flux, w, execution_id):
    w.claim(execution_id)
    await w.complete(execution_id)


async def _cancel_it(flux, w, execution_id):
    await flux.d.cancel(execution_id)


async def _lose_it(flux, w, execution_id):
    w.claim(execution_id)
    w.disconnect()
    flux.expire(GRACE)


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        pytest.param(_complete_it, [CREATED, SCHEDULED, RUNNING, COMPLETED], id="completed"),
        pytest.param(_cancel_it, [CREATED, SCHEDULED, CANCELLED], id="cancelled"),
        pytest.param(_lose_it, [CREATED, SCHEDULED, RUNNING, FAILED], id="worker lost"),
    ],
)
async def test_watch_yields_current_state_then_changes_until_final(flux, finish, expected):
    await flux.workflow(max_attempts=1)
    execution_id = await flux.run()
    seen: list[State] = []
    task = await _follow(flux, execution_id, seen)
    w = await flux.worker()
    await finish(flux, w, execution_id)
    await asyncio.wait_for(task, timeout=2)
    assert seen == expected
    assert len(flux.d.watchers) == 0


async def test_watch_of_a_finished_execution_yields_once(flux):
    await flux.workflow()
    execution_id = await flux.run()
    await flux.d.cancel(execution_id)

    async def collect() -> list[State]:
        return [e.state async for e in flux.d.watch(execution_id)]

    assert await asyncio.wait_for(collect(), timeout=2) == [CANCELLED]


async def test_a_wait_on_many_yields_the_finished_first_then_each_as_it_ends_and_leaves_no_watcher(flux):
    from flux.dispatcher.reads import waiting

    await flux.workflow(max_attempts=1)
    w = await flux.worker(capacity=4)
    ids = [await flux.run() for _ in range(3)]
    await flux.d.cancel(ids[0])
    stream = waiting.finals(flux.d, await waiting.known(flux.d, ids))
    first = await asyncio.wait_for(anext(stream), timeout=2)
    assert [(e.execution_id, e.state) for e in first] == [(ids[0], CANCELLED)]
    following = asyncio.ensure_future(anext(stream))
    await settled()
    assert len(flux.d.watchers) == 2 and not following.done()  # the two still running, on one queue
    w.claim(ids[2])
    await w.complete(ids[2])
    second = await asyncio.wait_for(following, timeout=2)
    assert [(e.execution_id, e.state) for e in second] == [(ids[2], COMPLETED)]
    await flux.d.cancel(ids[1])
    third = await asyncio.wait_for(anext(stream), timeout=2)
    assert [(e.execution_id, e.state) for e in third] == [(ids[1], CANCELLED)]
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    assert len(flux.d.watchers) == 0


async def test_a_wait_on_many_closed_early_leaves_no_watcher(flux):
    from flux.dispatcher.reads import waiting

    await flux.workflow()
    ids = [await flux.run() for _ in range(3)]
    stream = waiting.finals(flux.d, await waiting.known(flux.d, ids))
    pending = asyncio.ensure_future(anext(stream))
    await settled()
    assert len(flux.d.watchers) == 3 and not pending.done()
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    await stream.aclose()
    assert len(flux.d.watchers) == 0


# ---- limits ----------------------------------------------------------------------------------------


async def test_a_stream_that_falls_behind_is_cut_off_and_its_unread_work_requeued_at_once(flux):
    from flux.dispatcher.state import session as session_module

    await flux.workflow()
    w = await flux.worker(capacity=4096)
    running = await flux.run()
    w.claim(running)
    w.session._limit = 3  # from here on, a reader that never reads
    ids = [await flux.run() for _ in range(5)]
    assert w.session.closed and w.session.overflowed
    assert session_module.MAX_BUFFERED_EVENTS >= 1024
    unclaimed = flux.holdings("w1") - {running}
    assert len(unclaimed) == 3 and {flux.state(i) for i in unclaimed} == {SCHEDULED}  # then it took no more
    w.disconnect()
    # Its unread dispatches went with the stream: back in line now, not after the ack deadline.
    assert {flux.state(i) for i in ids} == {CREATED}
    assert flux.holdings("w1") == {running} and flux.state(running) is RUNNING  # claimed: its grace period
    assert flux.d.events.counters.requeued["stream_overflowed"] == 3
    with pytest.raises(FailedPrecondition):
        w.claim(
            sorted(unclaimed)[0], generation=1
        )  # read before the cut after all: refused, it is not its any more
    await settled()
    reader = await flux.worker("w2", capacity=16)
    assert sorted(reader.scheduled()) == sorted(ids)


@pytest.mark.parametrize(
    ("field", "value", "error", "message"),
    [
        pytest.param(
            "input", "x" * (4 * 1024 * 1024 + 1), "ResourceExhausted", "byte limit", id="input too large"
        ),
        pytest.param("input", "[" * 100_000, "InvalidArgument", "input_json", id="input nested too deep"),
        pytest.param(
            "source", "x" * (4 * 1024 * 1024 + 1), "ResourceExhausted", "workflow file", id="source"
        ),
        pytest.param("packages", 20_001, "ResourceExhausted", "software.packages", id="worker package list"),
    ],
)
async def test_limits_are_refused_naming_the_limit(flux, field, value, error, message):
    import flux.errors as errors

    await flux.workflow()
    with pytest.raises(getattr(errors, error), match=message):
        if field == "input":
            await flux.run("job", value)
        elif field == "source":
            record = WorkflowRecord("big", 0, "", "main", ResourceRequest(), {}, 3)
            await flux.d.register_workflows("big.py", value, [record])
        else:
            software = WorkerSoftware({f"pkg{i}": "1.0" for i in range(value)})
            await flux.d.register_worker(WorkerRegistration("many", resources(), software, {}))


@pytest.mark.parametrize("text", ["NaN", "[1, Infinity]", '{"x": -Infinity}'])
async def test_non_json_constants_are_refused(flux, text):
    await flux.workflow()
    with pytest.raises(InvalidArgument, match="is not JSON"):
        await flux.run("job", text)


async def test_a_mistyped_workflow_name_suggests_the_registered_one(flux: Flux) -> None:
    await flux.workflow("hello")
    await flux.workflow("goodbye")
    with pytest.raises(NotFound, match=r"'helo' is not registered; did you mean 'hello'\?"):
        await flux.run("helo")
    with pytest.raises(NotFound) as info:
        await flux.run("zzz")
    assert "did you mean" not in str(info.value)


async def test_a_connected_worker_is_seen_now_not_at_its_last_call(flux: Flux) -> None:
    idle = await flux.worker("idle")
    gone = await flux.worker("gone")
    gone.disconnect()
    registered_at = flux.clock.now
    housekeeping.keep_alive(flux.d, flux.clock.advance(120))  # two minutes without a single call from either
    assert flux.d.registry.entries["idle"].last_seen == flux.clock.now
    assert flux.d.registry.entries["gone"].last_seen == registered_at
    assert idle.session is not None


async def test_a_worker_that_never_connected_is_forgotten_without_a_warning(
    flux: Flux, caplog: pytest.LogCaptureFixture
) -> None:
    await flux.worker("shy", connect=False)
    lost = await flux.worker("lost")
    lost.disconnect()
    with caplog.at_level("INFO", logger="flux.dispatcher"):
        flux.expire(GRACE + 1)
    assert "shy" not in flux.d.registry.entries and "lost" not in flux.d.registry.entries
    levels = {
        r.getMessage().split()[1]: r.levelname
        for r in caplog.records
        if r.name == "flux.dispatcher" and r.getMessage().startswith("worker ")
    }
    assert levels == {"shy": "INFO", "lost": "WARNING"}


# ---- bounded memory and admission ----------------------------------------------------------------


def limited(flux: Flux, **limits: int) -> None:
    flux.d.settings = dataclasses.replace(SETTINGS, **limits)


async def test_large_pending_inputs_live_in_the_store_and_load_at_dispatch(flux):
    limited(flux, inline_input_bytes=1024)
    await flux.workflow()
    big, small = '"' + "x" * 4096 + '"', '{"n": 1}'
    big_id, small_id = await flux.run(input_json=big), await flux.run(input_json=small)
    # Held without the large payload; the small one stays inline (no store read to dispatch it).
    assert flux.d.table.unfinished[big_id].input_json == ""
    assert flux.d.table.unfinished[small_id].input_json == small
    assert flux.d.table.unfinished.input_bytes == len(big) + len(small)
    # Clients still see the input.
    assert (await flux.d.get(big_id)).input_json == big
    w = await flux.worker()
    sent = {e.execution.execution_id: e.execution for e in w.events() if isinstance(e, Scheduled)}
    assert sent[big_id].input_json == "" and sent[small_id].input_json == small
    # The edge that sends a dispatch loads it (the servicer calls with_input).
    assert (await flux.d.with_input(sent[big_id])).input_json == big
    # Requeued, it waits without its payload again; finished, it no longer counts.
    w.disconnect()
    flux.expire(GRACE)
    assert (
        flux.d.table.unfinished[big_id].state is CREATED and flux.d.table.unfinished[big_id].input_json == ""
    )
    await flux.d.cancel(big_id)
    await flux.d.cancel(small_id)
    assert flux.d.table.unfinished.input_bytes == 0
    assert flux.store.executions[big_id].input_json == big  # the store row was never rewritten


async def test_admission_refuses_past_the_pending_count_and_bytes(flux):
    limited(flux, max_pending=2, max_pending_bytes=100)
    await flux.workflow()
    first = await flux.run(input_json='"' + "a" * 40 + '"')
    await flux.run()
    with pytest.raises(
        ResourceExhausted, match=r"2 executions are unfinished; the limit is 2 \(--max-pending\)"
    ):
        await flux.run()
    await flux.d.cancel(first)
    with pytest.raises(ResourceExhausted, match=r"the limit of 100 \(--max-pending-bytes\)"):
        await flux.run(input_json='"' + "b" * 100 + '"')
    await flux.run(input_json='"' + "b" * 50 + '"')


async def test_the_finished_cache_keeps_payloads_within_its_byte_budget(flux):
    limited(flux, finished_cache_bytes=300)
    await flux.workflow()
    w = await flux.worker()
    outputs = {}
    for n in range(3):
        execution_id = await flux.run()
        w.claim(execution_id)
        outputs[execution_id] = '"' + str(n) * 200 + '"'
        await w.complete(execution_id, outputs[execution_id])
    assert list(flux.d.table.finished) == list(outputs)[-1:]
    assert flux.d.table.finished_bytes <= 300
    for execution_id, output in outputs.items():  # dropped ones are read back from the store
        assert (await flux.d.get(execution_id)).output_json == output


async def test_registered_workers_are_capped(flux):
    limited(flux, max_workers=2)
    a = await flux.worker("a")
    await flux.worker("b")
    with pytest.raises(
        ResourceExhausted, match=r"2 workers are registered; the limit is 2 \(--max-workers\)"
    ):
        await flux.worker("c")
    # A known worker re-registering is not a new one.
    registration = WorkerRegistration("a", resources(), WorkerSoftware(), {}, session_token=a.token)
    assert await flux.d.register_worker(registration) == a.token
    await flux.d.forget_worker("b")
    await flux.worker("c")


async def test_worker_metadata_is_capped_on_register_and_report(flux):
    limited(flux, max_worker_metadata=1000)
    heavy = WorkerSoftware({f"package-{i}": "1.0.0" for i in range(100)}, {})
    registration = WorkerRegistration("w1", resources(), heavy, {})
    with pytest.raises(
        ResourceExhausted, match=r"take 1490 bytes; the limit is 1000 per worker \(--max-worker-metadata\)"
    ):
        await flux.d.register_worker(registration)
    w = await flux.worker("w1")
    with pytest.raises(ResourceExhausted, match="--max-worker-metadata"):
        flux.d.report("w1", w.token, resources(), heavy, False)


# ----------------------------------------------------------------- callers that go away


async def test_a_submission_whose_caller_goes_away_neither_cancels_others_in_its_commit_nor_stays_unqueued(
    flux,
) -> None:
    """A cut RunWorkflow once cancelled the store batch its row shared: every other submission in it
    went unanswered (the bench's clients hung), and rows written anyway were never queued."""
    await flux.workflow()
    gone = asyncio.ensure_future(flux.d.submit("job", "1"))
    kept = asyncio.ensure_future(flux.d.submit("job", "2"))
    await asyncio.sleep(0)  # both rows wait in the store's next batch
    gone.cancel()
    execution = await asyncio.wait_for(kept, 5)
    await settled()
    assert gone.cancelled()
    stored = {e.input_json for e in flux.store.executions.values()}
    queued = {e.input_json for e in flux.d.table.unfinished.values() if e.state is CREATED}
    assert stored == queued == {"1", "2"}
    assert flux.store.executions[execution.execution_id].state is CREATED


async def test_a_result_whose_caller_goes_away_is_still_committed_and_shown(flux) -> None:
    """A worker's stream cut while its result commits: the result is stored and shown final."""
    await flux.workflow()
    worker = await flux.worker()
    execution_id = await flux.run()
    worker.claim(execution_id)
    other_id = await flux.run()
    worker.claim(other_id)
    cut = asyncio.ensure_future(worker.complete(execution_id))
    kept = asyncio.ensure_future(worker.complete(other_id, '"kept"'))
    await asyncio.sleep(0)
    cut.cancel()
    assert (await asyncio.wait_for(kept, 5)).state is COMPLETED
    await settled()
    assert flux.store.executions[execution_id].state is COMPLETED
    assert execution_id not in flux.d.table.committing
    assert (await flux.d.get(execution_id)).state is COMPLETED
