"""Calls that arrive together leave together: claims or results gathered into one batched call.

Nothing waits on purpose. The first item starts a sender that runs once the loop has
run what was already ready (the other dispatches of the same burst), so it takes
everything submitted by then; items submitted while its call is in flight go in
the next call. One call is in flight at a time: under load the batches grow on
their own, and a lone item goes out at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from flux.errors import FluxError, Unavailable

T = TypeVar("T")

# Per item: None when accepted, else the refusal for that item.
Send = Callable[[list[T]], Awaitable[list[FluxError | None]]]

MAX_ITEMS = 256
# Results carry outputs: a batch stays well under the gRPC and gateway message limits (16 MiB), and
# an item bigger than this goes alone, so a refusal for its size is its own, as with a single call.
MAX_BYTES = 1024 * 1024


class Batcher(Generic[T]):
    def __init__(self, send: Send[T], size: Callable[[T], int] = lambda _: 0):
        self._send = send
        self._size = size
        self._queue: list[tuple[T, asyncio.Future[None]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> None:
        """Sends ``item`` in the next batch; raises its refusal, or the whole call's error."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._sender is None:
            self._sender = asyncio.create_task(self._run())
        await future

    def _take(self) -> list[tuple[T, asyncio.Future[None]]]:
        batch: list[tuple[T, asyncio.Future[None]]] = []
        total = 0
        while self._queue and len(batch) < MAX_ITEMS:
            item, future = self._queue[0]
            size = self._size(item)
            if batch and total + size > MAX_BYTES:
                break
            del self._queue[0]
            if not future.done():  # its caller was cancelled meanwhile: nothing to send
                batch.append((item, future))
                total += size
        return batch

    async def _run(self) -> None:
        try:
            await asyncio.sleep(0)  # one turn of the loop: what is ready by now joins this batch
            while self._queue:
                batch = self._take()
                if batch:
                    await self._flush(batch)
        finally:
            self._sender = None

    async def _flush(self, batch: list[tuple[T, asyncio.Future[None]]]) -> None:
        try:
            answers = await self._send([item for item, _ in batch])
        except asyncio.CancelledError:
            for _, future in batch:
                if not future.done():
                    future.set_exception(Unavailable("the worker stopped before this call was answered"))
            raise
        except Exception as exc:  # the whole call failed: each item sees what its single call would
            self._fail(batch, exc)
            return
        if len(answers) != len(batch):  # never taken as accepted: each item is sent again
            self._fail(batch, Unavailable(f"{len(answers)} answers to a batch of {len(batch)}; retry"))
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            if future.done():
                continue
            if answer is None:
                future.set_result(None)
            else:
                future.set_exception(answer)

    @staticmethod
    def _fail(batch: list[tuple[T, asyncio.Future[None]]], error: Exception) -> None:
        for _, future in batch:
            if not future.done():
                future.set_exception(error)
