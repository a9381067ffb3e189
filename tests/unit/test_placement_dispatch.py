"""Placement policies in the dispatcher (issue 45): the server's default, a workflow's own, pool
demand under binpack, explain's note, and the option as a workflow declares it."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest

from flux import ResourceRequest, workflow
from flux.dispatcher.core import Dispatcher
from flux.domain.workflow import WorkflowRecord
from flux.matching.pools import POOL_LABEL
from flux.registration.declarations import read_declarations
from tests.unit.harness import SETTINGS, Flux


async def _flux(placement: str) -> Flux:
    flux = Flux()
    flux.d = Dispatcher(flux.store, replace(SETTINGS, placement=placement), clock=flux.clock)
    return await flux.start()


async def _workflow(flux: Flux, name: str, placement: str = "", **requests: int) -> None:
    declared = WorkflowRecord(name, 0, "", "main", ResourceRequest(**requests), {}, 3, placement=placement)
    await flux.d.register_workflows(f"{name}.py", f"# {name}\n", [declared])


async def _spread_over(placement: str, workflow_placement: str = "") -> tuple[list[int], int]:
    flux = await _flux(placement)
    await _workflow(flux, "job", workflow_placement, cpu=1)
    workers = [await flux.worker(f"w{i}", cpu=4, capacity=4, labels={POOL_LABEL: "cpu"}) for i in range(3)]
    for _ in range(4):
        await flux.run("job")
    demand = await flux.d.pools.get(flux.d, "cpu")
    return [len(w.scheduled()) for w in workers], demand.desired


async def test_binpack_fills_one_worker_and_its_pool_wants_fewer_workers():
    spread, spread_desired = await _spread_over("spread")
    packed, packed_desired = await _spread_over("binpack")
    assert spread == [2, 1, 1] and spread_desired == 3
    assert packed == [4, 0, 0] and packed_desired == 1  # two idle workers: the pool can scale in


async def test_a_workflows_own_placement_wins_over_the_servers():
    assert (await _spread_over("spread", "binpack"))[0] == [4, 0, 0]
    assert (await _spread_over("binpack", "spread"))[0] == [2, 1, 1]


async def test_explain_names_the_policy_when_free_gpus_are_spread_too_thin():
    flux = await _flux("spread")
    await _workflow(flux, "one", gpu=1)
    await _workflow(flux, "eight", gpu=8)
    workers = [await flux.worker(f"g{i}", cpu=8, gpus=8) for i in range(2)]
    for _ in range(2):
        await flux.run("one")
    assert [len(w.scheduled()) for w in workers] == [1, 1]
    waiting = await flux.run("eight")
    why = await flux.d.why(waiting)
    assert "14 GPUs are free over 2 workers but at most 7 on one (placement spread)" in why.summary
    assert "binpack (--placement binpack, or placement='binpack') keeps whole workers free" in why.summary

    packed = await _flux("binpack")
    await _workflow(packed, "one", gpu=1)
    await _workflow(packed, "eight", gpu=8)
    workers = [await packed.worker(f"g{i}", cpu=8, gpus=8) for i in range(2)]
    for _ in range(2):
        await packed.run("one")
    assert [len(w.scheduled()) for w in workers] == [2, 0]
    placed = await packed.run("eight")
    assert workers[1].scheduled() == [placed]


def test_the_option_is_declared_checked_and_read_statically():
    @workflow.with_options(placement="binpack")
    async def packed(ctx):
        return None

    assert packed.__flux_workflow__.placement == "binpack"

    @workflow
    async def plain(ctx):
        return None

    assert plain.__flux_workflow__.placement == ""
    with pytest.raises(ValueError, match=r"placement must be 'spread' .* or 'binpack'.*; got 'pack'"):
        workflow.with_options(placement="pack")
    with pytest.raises(TypeError, match="placement must be"):
        workflow.with_options(placement=1)  # type: ignore[arg-type]
    source = textwrap.dedent(
        """
        from flux import workflow

        @workflow.with_options(placement="binpack")
        async def job(ctx):
            return 1
        """
    )
    [definition] = read_declarations(source, "wf.py")
    assert definition.placement == "binpack"
