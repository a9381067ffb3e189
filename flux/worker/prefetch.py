"""A pipelining worker's own queue (``flux start worker --prefetch N``).

The server may send a worker up to N executions beyond its room, marked queued: nothing is
reserved for them yet. The worker keeps them here, by priority then in the order sent, and starts the first only
when its own room allows (what its running executions hold, against its allocatable totals and
its capacity), claiming it then; the server reserves at that claim. The first waits for room
while later ones might fit (a 2-core execution behind 1-core ones): strict order, so nothing
queued here waits forever behind what arrives after it.

A queued execution is never run without a claim: its body starts with the claim on its way, as a
direct dispatch's does, and a refused claim stops it. The server takes a queue back whole when
the stream closes or the worker drains (``clear``), and cancels one by one (``drop``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources
from flux.worker.transport import Dispatch

T = TypeVar("T")


def fits(
    requests: ResourceRequest,
    running: Iterable[ResourceRequest],
    capacity: int,
    totals: WorkerResources | None,
) -> bool:
    """Whether an execution needing ``requests`` fits beside ``running`` on this worker.

    By what the executions hold, not by observed usage: the server reserves the same way, so a
    claim sent when this says yes is one the server takes. Totals unknown (no sample yet): by count.
    """
    held = list(running)
    if len(held) >= max(1, capacity):
        return False
    if totals is None:
        return True
    cpu = sum(r.cpu for r in held) + requests.cpu
    memory = sum(r.memory for r in held) + requests.memory
    disk = sum(r.disk for r in held) + requests.disk
    return (
        (requests.cpu == 0 or cpu <= totals.cpu_total)
        and (requests.memory == 0 or memory <= totals.memory_total)
        and (requests.disk == 0 or disk <= totals.disk_total)
    )


class LocalQueue:
    """The dispatches queued at this worker, oldest first."""

    def __init__(self) -> None:
        self._waiting: deque[Dispatch] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, execution_id: object) -> bool:
        return any(d.execution_id == execution_id for d in self._waiting)

    def add(self, dispatch: Dispatch) -> None:
        """Behind every queued dispatch of its priority or higher, ahead of the lower ones."""
        place = len(self._waiting)
        while place and self._waiting[place - 1].priority < dispatch.priority:
            place -= 1
        self._waiting.insert(place, dispatch)

    def drop(self, execution_id: str, generation: int) -> bool:
        """Forget a queued dispatch (cancelled); whether it was here."""
        for dispatch in self._waiting:
            if dispatch.execution_id == execution_id and dispatch.generation == generation:
                self._waiting.remove(dispatch)
                return True
        return False

    def clear(self) -> int:
        """Forget them all: the server took them back (a new stream, draining). How many."""
        count = len(self._waiting)
        self._waiting.clear()
        return count

    def ready(
        self, running: Iterable[ResourceRequest], capacity: int, totals: WorkerResources | None
    ) -> list[Dispatch]:
        """Take, in order, the dispatches that fit now beside ``running`` and each other."""
        held = list(running)
        started: list[Dispatch] = []
        while self._waiting and fits(self._waiting[0].requests, held, capacity, totals):
            dispatch = self._waiting.popleft()
            held.append(dispatch.requests)
            started.append(dispatch)
        return started


class ResultsInFlight:
    """Results of ended bodies not yet answered. The server counts a worker's room by the results it
    has, so a queued execution's own claim (a body past ``CLAIM_DELAY``, or traced) waits for the
    results that were in flight when it started, the ones whose room it took: over the SSE gateway
    calls are not ordered, and a claim read first would be refused. A claim that rides in its own
    result needs no wait: results go one call at a time, in order."""

    def __init__(self) -> None:
        self._pending: set[asyncio.Future[None]] = set()

    def begin(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.add(future)
        return future

    def end(self, future: asyncio.Future[None]) -> None:
        if not future.done():
            future.set_result(None)
        self._pending.discard(future)

    def snapshot(self) -> tuple[asyncio.Future[None], ...]:
        return tuple(self._pending)


async def after_results(results: tuple[asyncio.Future[None], ...], call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` once every one of ``results`` is answered (or given up)."""
    if results:
        await asyncio.wait(results)
    return await call()
