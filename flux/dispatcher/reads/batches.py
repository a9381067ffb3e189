"""A batch's progress: its members counted by state, from their committed rows (one grouped read
over the ``(batch_id, state)`` index), so every replica answers the same.

Counted as committed: a member dispatched but not yet claimed still counts as waiting (a dispatch
is written at its claim), so ``running`` never shows more than ran. ``watch`` rereads the counts
every ``WATCH_EVERY`` seconds while the batch is unfinished and yields each change: a batch's
members may finish on any replica, and the count is one indexed read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from flux.domain.batch import Batch, BatchProgress

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle

WATCH_EVERY = 0.25


async def progress(d: Handle, batch: Batch) -> BatchProgress:
    return BatchProgress.of(batch, await d.store.batch_counts(batch.batch_id))


async def watch(d: Handle, batch: Batch) -> AsyncIterator[BatchProgress]:
    """The progress now, then each change, ending with the first in which every member is finished."""
    last = None
    while True:
        now = await progress(d, batch.evolve_cancelled(await _cancelled_at(d, batch)))
        if now != last:
            yield now
            last = now
        if now.finished:
            return
        await asyncio.sleep(WATCH_EVERY)


async def _cancelled_at(d: Handle, batch: Batch) -> float:
    if batch.cancelled_at:
        return batch.cancelled_at
    stored = await d.store.get_batch(batch.batch_id)
    return stored.cancelled_at if stored is not None else 0.0
