"""The gRPC worker transport's error mapping: a call cut off by a closing channel is retryable."""

from __future__ import annotations

import asyncio

import pytest

from flux.errors import Unavailable
from flux.worker.grpc_transport import _mapped


async def test_a_call_cancelled_by_its_closing_channel_is_unavailable() -> None:
    @_mapped
    async def cut_off() -> None:
        raise asyncio.CancelledError  # what grpc.aio raises in a call whose channel closes

    with pytest.raises(Unavailable, match="connection to the server closed"):
        await cut_off()


async def test_cancelling_the_caller_still_cancels() -> None:
    started = asyncio.Event()

    @_mapped
    async def slow() -> None:
        started.set()
        await asyncio.sleep(60)

    task = asyncio.create_task(slow())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
