"""Many calls on one stream: each request message answered at once, or handled in a task of its
own (at most ``limit`` at once; reading waits for a free slot), its answers written as they are
ready. WorkerCalls answers a claim as it reads it and completes in tasks; RunAndWaitStream runs
and waits each run in a task.

The stream ends once the caller has stopped writing and every call is answered; a caller's
stream failing (a malformed message) ends this one the same way.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

Request = TypeVar("Request")
Answer = TypeVar("Answer")


async def multiplexed(
    requests: AsyncIterator[Request],
    handle: Callable[[Request, Callable[[Answer], None]], Awaitable[None] | None],
    limit: int,
) -> AsyncIterator[Answer]:
    """The answers ``handle(request, answer)`` gives for every request, in the order given.

    ``handle`` answers at once and returns None, or returns what to await in a task (which
    answers when done). It answers its own errors: one that escapes it ends the stream.
    """
    answers: asyncio.Queue[Answer | BaseException | None] = asyncio.Queue()
    slots = asyncio.Semaphore(limit)
    running: set[asyncio.Task[None]] = set()

    async def one(pending: Awaitable[None]) -> None:
        try:
            await pending
        except Exception as exc:
            answers.put_nowait(exc)
        finally:
            slots.release()

    async def read() -> None:
        try:
            async for request in requests:
                pending = handle(request, answers.put_nowait)
                if pending is None:
                    continue
                try:
                    await slots.acquire()
                except BaseException:
                    if inspect.iscoroutine(pending):
                        pending.close()  # never started: no "never awaited" warning
                    raise
                task = asyncio.create_task(one(pending))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.wait(set(running))
        finally:
            answers.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (answer := await answers.get()) is not None:
            if isinstance(answer, BaseException):
                raise answer
            yield answer
        await reader
    finally:
        reader.cancel()
        for task in list(running):
            task.cancel()
