"""A worker told to stop a body: a Stop repeated on a new stream does not cut short the body's own
clean-up after the first, while a Stop that is not a hand-back always cancels (pure: no transport,
the runtime's own bookkeeping and real asyncio tasks)."""

from __future__ import annotations

import asyncio

from flux.domain.execution import WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.worker.claims import Running
from flux.worker.runtime import WorkerConfig, WorkerRuntime
from flux.worker.transport import Cancel, Dispatch


def _dispatch() -> Dispatch:
    ref = WorkflowRef("stubborn", 1, "hash", "stubborn")
    return Dispatch("e1", 1, 3, "null", ref, (), ResourceRequest())


async def _told(stops: list[Cancel]) -> int:
    """How many times a body that cleans up for a moment after being stopped was interrupted."""
    runtime = WorkerRuntime(WorkerConfig("w1"), transport=None, probe=None)  # type: ignore[arg-type]
    interrupted = 0
    started = asyncio.Event()

    async def body() -> None:
        nonlocal interrupted
        started.set()
        while True:
            try:
                await asyncio.sleep(0.05 if interrupted else 60)
                if interrupted:
                    return  # its clean-up ended on its own
            except asyncio.CancelledError:
                interrupted += 1
                if interrupted > 1:
                    return

    task = asyncio.create_task(body())
    runtime._running["e1"] = Running(_dispatch(), task)
    await started.wait()
    for stop in stops:
        runtime._cancel(stop)
        await asyncio.sleep(0.01)
    await asyncio.wait_for(task, 5)
    return interrupted


def test_a_repeated_hand_back_stop_interrupts_the_body_once() -> None:
    again = Cancel("e1", 3, "reclaimed", preempted=True)
    assert asyncio.run(_told([again, again])) == 1


def test_a_stop_that_is_not_a_hand_back_cancels_again() -> None:
    first = Cancel("e1", 3, "reclaimed", preempted=True)
    expired = Cancel("e1", 3, "preemption grace expired")
    assert asyncio.run(_told([first, expired])) == 2


def test_a_stop_for_another_generation_is_not_this_bodys() -> None:
    stale = Cancel("e1", 2, "reclaimed", preempted=True)
    first = Cancel("e1", 3, "reclaimed", preempted=True)
    assert asyncio.run(_told([stale, first])) == 1
