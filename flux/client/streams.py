"""Several server streams read side by side, each item yielded as it arrives, so an order that
holds within one stream (``WaitExecutions``: completion order) holds across all of them: with a
thread per stream for ``flux.client``, a task per call for ``flux.aio``.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

import grpc

T = TypeVar("T")


def threaded(streams: list[Iterator[T]], name: str) -> Iterator[T]:
    """Every item of ``streams``, each read in its own daemon thread (named ``name``); a stream's
    exception is raised here, so completion order holds across them all. A lone stream is read
    here, in the caller's thread."""
    if len(streams) == 1:
        yield from streams[0]
        return
    merged: queue.Queue[T | BaseException | None] = queue.Queue()

    def read(stream: Iterator[T]) -> None:
        try:
            for item in stream:
                merged.put(item)
        except BaseException as exc:
            merged.put(exc)
        merged.put(None)

    for stream in streams:
        threading.Thread(target=read, args=(stream,), name=name, daemon=True).start()
    open_streams = len(streams)
    while open_streams:
        item = merged.get()
        if item is None:
            open_streams -= 1
        elif isinstance(item, BaseException):
            raise item
        else:
            yield item


async def tasks(
    calls: list[Any],
    items: Callable[[Any], Iterable[T]],
    error: Callable[[grpc.RpcError], Awaitable[BaseException]],
) -> AsyncIterator[T]:
    """The ``items`` of every answer of the streaming ``calls``, each call read by its own task; a
    call's failure is raised as ``error`` names it. Leaving cancels every call and its reader."""
    merged: asyncio.Queue[T | BaseException | None] = asyncio.Queue()

    async def read(call: Any) -> None:
        try:
            async for answer in call:
                for item in items(answer):
                    merged.put_nowait(item)
        except grpc.RpcError as exc:
            merged.put_nowait(await error(exc))
        merged.put_nowait(None)

    readers = [asyncio.ensure_future(read(call)) for call in calls]
    try:
        open_calls = len(calls)
        while open_calls:
            item = await merged.get()
            if item is None:
                open_calls -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for call, reader in zip(calls, readers, strict=True):
            call.cancel()
            reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*readers, return_exceptions=True)
