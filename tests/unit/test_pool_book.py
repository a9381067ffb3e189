"""The dispatcher's pool book over an in-memory store: declarations kept, demand, watchers, explain."""

from __future__ import annotations

import asyncio

import pytest

from flux.errors import InvalidArgument, NotFound
from flux.matching.pools import POOL_LABEL, parse_pools
from tests.unit.harness import Flux

GPU = {"name": "gpu", "resources": {"cpu": 4, "gpu": 2}, "capacity": 2, "max": 5}


async def test_declarations_are_stored_and_read_back_by_a_new_dispatcher():
    flux = await Flux().start()
    await flux.d.pools.apply(parse_pools([GPU]))
    again = await Flux(store=flux.store).start()
    demand = await again.d.pools.demand(again.d)
    assert list(demand) == ["gpu"] and demand["gpu"].spec.gpu == 2


async def test_apply_refuses_nothing_and_duplicates():
    flux = await Flux().start()
    with pytest.raises(InvalidArgument, match="at least one pool"):
        await flux.d.pools.apply([])
    (spec,) = parse_pools([GPU])
    with pytest.raises(InvalidArgument, match="names a pool twice"):
        await flux.d.pools.apply([spec, spec])


async def test_pending_gpu_work_is_demand_and_explain_names_the_pool():
    flux = await Flux().start()
    await flux.d.pools.apply(parse_pools([GPU]))
    await flux.workflow("train", gpu=1)
    ids = [await flux.run("train") for _ in range(3)]
    demand = await flux.d.pools.get(flux.d, "gpu")
    assert (demand.pending, demand.desired, demand.active) == (3, 2, True)
    why = await flux.d.why(ids[0])
    assert why.summary == "0/0 workers can run it: no worker is connected; pool gpu could run it (0 workers)"
    with pytest.raises(NotFound, match="pool 'cpu' is neither declared nor has a worker"):
        await flux.d.pools.get(flux.d, "cpu")


async def test_a_pool_is_learned_from_its_worker_and_its_running_work_counts():
    flux = await Flux().start()
    await flux.workflow("job", cpu=1)
    worker = await flux.worker("w1", cpu=4, labels={POOL_LABEL: "cpu"}, capacity=4)
    execution = await flux.run("job")
    assert worker.scheduled() == [execution]
    demand = await flux.d.pools.get(flux.d, "cpu")
    assert demand.spec.source == "learned" and demand.spec.cpu == 4
    assert (demand.workers, demand.busy_workers, demand.running, demand.desired) == (1, 1, 1, 1)


async def test_subscribers_get_one_recomputation_per_burst():
    flux = await Flux().start()
    await flux.d.pools.apply(parse_pools([GPU]))
    await flux.workflow("train", gpu=1)
    seen: list[bool] = []
    first, stop = await flux.d.pools.subscribe("gpu", seen.append)
    assert first is False
    try:
        before = flux.d.pools.recomputations
        # Twenty submissions committed in one batch (one event-loop turn): one recomputation, after all.
        await asyncio.gather(*(flux.d.submit("train", "") for _ in range(20)))
        await asyncio.wait_for(_until(lambda: seen), 5)
        assert seen == [True] and flux.d.pools.recomputations == before + 1
    finally:
        stop()


async def test_a_change_wakes_only_the_subscribers_whose_pool_flipped():
    """Issue 40: many streams on a busy pool cost nothing when more work arrives; the one on the
    pool that flipped is called once; the demand is computed once for all of them."""
    flux = await Flux().start()
    await flux.d.pools.apply(
        parse_pools([GPU, {"name": "cpu", "labels": {"kind": "cpu"}, "resources": {"cpu": 4}}])
    )
    await flux.workflow("train", gpu=1)
    await flux.d.submit("train", "")
    pools = flux.d.pools
    busy: list[bool] = []
    idle: list[bool] = []
    stops = []
    for _ in range(500):
        active, stop = await pools.subscribe("gpu", busy.append)
        assert active is True
        stops.append(stop)
    active, stop = await pools.subscribe("cpu", idle.append)
    stops.append(stop)
    try:
        assert active is False
        before = (pools.computations, pools.recomputations)
        await asyncio.gather(*(flux.d.submit("train", "") for _ in range(20)))
        await asyncio.wait_for(_until(lambda: pools.recomputations > before[1]), 5)
        await asyncio.sleep(0.05)  # room for a second, wrong, round of wake-ups
        assert busy == [] and idle == []  # gpu was active already; cpu got nothing
        assert pools.computations - before[0] == pools.recomputations - before[1] == 1
    finally:
        for stop in stops:
            stop()


async def test_an_unknown_pool_is_refused_from_memory():
    flux = await Flux().start()
    await flux.d.pools.apply(parse_pools([GPU]))
    await flux.d.pools.load()  # fresh: the slow re-read is not due
    pools = flux.d.pools
    reads, computations = pools.reads, pools.computations
    for _ in range(50):
        with pytest.raises(NotFound) as caught:
            await pools.get(flux.d, "ghost")
        assert "gpu" not in str(caught.value)  # the other pools are not the caller's to learn
        with pytest.raises(NotFound):
            await pools.subscribe("ghost", lambda active: None)
    assert (pools.reads, pools.computations) == (reads, computations)


async def _until(check) -> None:  # type: ignore[no-untyped-def]
    while not check():
        await asyncio.sleep(0.005)


@pytest.mark.parametrize(
    ("wait", "counted"),
    [pytest.param(10.0, 1, id="retry due within 30 s"), pytest.param(120.0, 0, id="retry due in 2 min")],
)
async def test_work_waiting_for_a_retry_is_demand_only_when_its_try_is_near(wait: float, counted: int):
    flux = await Flux().start()
    await flux.d.pools.apply(parse_pools([GPU]))
    await flux.workflow("train", gpu=1)
    execution_id = await flux.run("train")
    d = flux.d
    # Its first attempt failed and its retry waits ``wait`` seconds (out of the queue until then).
    d.queue.remove(execution_id)
    waiting = d.table.get(execution_id).evolve(attempt=2, not_before=d.clock() + wait)
    d.table.update(waiting)
    d.queue_up(waiting, d.catalogue.shape_of(waiting))
    assert execution_id not in d.queue
    assert (await d.pools.get(d, "gpu")).pending == counted
