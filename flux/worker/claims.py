"""An execution's claim as the worker sends it: held back a moment in case its result can carry it
(``PendingClaim``), or batched with others (``ClaimCall``); and ``Running``, the worker's record
of an execution it runs and where its claim was last accepted. Its own module because these are
small values that executions.py and runtime.py share, apart from running the body."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from flux.worker.transport import Dispatch

# A body that ends within this sends its claim inside its result's call, where the server takes that:
# one message each way instead of two. A longer one is claimed once this has passed, so the server
# shows it RUNNING; the body does not wait for it either way (it started with the dispatch).
CLAIM_DELAY = 0.02


class PendingClaim:
    """An execution's claim: sent now, or held back ``delay`` seconds in case its result can carry it."""

    def __init__(self, send: Callable[[], asyncio.Task[bool]], delay: float | None):
        self._send = send
        self._task: asyncio.Task[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        if delay is None:
            self._start()
        else:
            self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._timer = None
        self._task = self._send()

    def settle(self) -> asyncio.Task[bool] | None:
        """The claim's call; None when it was still held back, and then it is never sent: the result
        carries it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return self._task

    def cancel(self) -> None:
        task = self.settle()
        if task is not None:
            task.cancel()


@dataclass(frozen=True, slots=True)
class ClaimCall:
    """One claim for the claims batcher."""

    execution_id: str
    generation: int
    # Set once the claim is on a stream the server reads in order: a result sent after it is read
    # after it, so it need not wait for the claim's answer. Never set where calls are not ordered.
    written: asyncio.Future[None] | None = None

    @staticmethod
    def all_written(calls: list[ClaimCall]) -> None:
        for call in calls:
            if call.written is not None and not call.written.done():
                call.written.set_result(None)


@dataclass(slots=True)
class Running:
    dispatch: Dispatch
    task: asyncio.Task[None]
    cancelled_by_server: bool = False
    # Stopped so a tenant could reclaim its quota: handed back (Release), not dropped.
    preempted: bool = False
    # The stream (count of Connected) during which the server last accepted our claim; None
    # before the first. A server reached on a later stream may not know of it: a replica that
    # adopted this dispatch holds it as unclaimed if the one that answered died before storing it.
    claimed_in: int | None = None
    # Its body has returned (its result may still be on its way): it holds no room here any more.
    body_ended: bool = False
    # Queued here and started in the room of these results (prefetch.ResultsInFlight): its own claim waits for them.
    after: tuple[asyncio.Future[None], ...] = ()
