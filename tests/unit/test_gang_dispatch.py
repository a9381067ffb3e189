"""Gangs through the dispatcher (the harness's in-memory store and workers): a pass scoped to the
workers that freed room still completes a gang with room elsewhere."""

from __future__ import annotations

from flux.domain.execution import State
from flux.domain.gang import Gang
from flux.domain.resource_request import ResourceRequest
from flux.domain.workflow import WorkflowRecord
from tests.unit.harness import Flux


async def gang_workflow(flux: Flux, size: int, **requests: int) -> None:
    declared = WorkflowRecord("team", 0, "", "main", ResourceRequest(**requests), {}, 3, gang=Gang(size))
    await flux.d.register_workflows("team.py", "# team\n", [declared])


async def test_a_worker_that_joins_completes_a_waiting_gang_at_once_not_at_the_next_tick(flux):
    await gang_workflow(flux, 2, cpu=1)
    await flux.worker("w1")
    gang = await flux.run("team")
    assert flux.state(gang) is State.CREATED  # one worker: no gang of 2 yet
    await flux.worker("w2")  # its pass is scoped to w2, yet the gang needs w1 as well
    assert flux.state(gang) is State.SCHEDULED
    assert flux.holdings("w1") == flux.holdings("w2") == {gang}


async def test_room_freed_on_one_worker_completes_a_gang_with_room_on_another(flux):
    await flux.workflow("single", cpu=4)
    await gang_workflow(flux, 2, cpu=4)
    w1 = await flux.worker("w1")
    await flux.worker("w2")
    first = await flux.run("single")
    gang = await flux.run("team")
    assert flux.state(gang) is State.CREATED and flux.holdings("w1") | flux.holdings("w2") == {first}
    busy = w1 if flux.holdings("w1") else None
    assert busy is not None
    busy.claim(first)
    await busy.complete(first)  # w1's room is freed: its pass places the gang on w1 and w2
    assert flux.state(gang) is State.SCHEDULED
    assert flux.holdings("w1") == flux.holdings("w2") == {gang}


async def test_a_gang_run_after_another_waits_for_it_then_is_placed_as_a_gang(flux):
    from flux.dispatcher.transitions.submission import Overrides

    await flux.workflow("single", cpu=1)
    await gang_workflow(flux, 2, cpu=1)
    w1 = await flux.worker("w1")
    await flux.worker("w2")
    first = await flux.run("single")
    gang = (await flux.d.submit("team", overrides=Overrides(gang_size=2, after=(first,)))).execution_id
    assert flux.state(gang) is State.CREATED and flux.get(gang).waiting == 1
    runner = w1 if first in flux.holdings("w1") else None
    assert runner is not None
    runner.claim(first)
    await runner.complete(first, '"done"')
    assert flux.state(gang) is State.SCHEDULED
    assert flux.holdings("w1") == flux.holdings("w2") == {gang}
    assert [m[0] for m in flux.get(gang).gang.members] in (["w1", "w2"], ["w2", "w1"])
