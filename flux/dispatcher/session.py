"""A worker's live dispatch stream, as the core sees it: a queue of domain events.

Transports (the gRPC servicer, the SSE gateway through it) drain the queue and
convert each event to the wire at the edge. The core never awaits a slow
reader: pushing is a non-blocking put.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from flux.domain.execution import Execution
from flux.domain.resource_request import ResourceRequest


@dataclass(frozen=True, slots=True)
class Scheduled:
    execution: Execution
    requests: ResourceRequest


@dataclass(frozen=True, slots=True)
class Cancelled:
    execution_id: str
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class Ping:
    sent_at: float


Event = Scheduled | Cancelled | Ping

_CLOSE = object()

# Events one stream may have waiting. A reader that falls this far behind (a
# stalled SSE client, a wedged worker) is cut off rather than growing server
# memory; what it never claimed goes back in line when the stream ends (Dispatcher.disconnect).
MAX_BUFFERED_EVENTS = 1024


class Session:
    """One connected stream of one worker. Replaced, not reused, on reconnect."""

    def __init__(
        self, worker: str, transport: str, held: Mapping[str, int], limit: int = MAX_BUFFERED_EVENTS
    ):
        self.worker = worker
        self.transport = transport
        # Executions the core believes this worker holds, with their generations, sent in Connected.
        self.held = held
        self.closed = False
        # Monotonic time of the last event pushed; idle streams get a Ping.
        self.last_sent = time.monotonic()
        self.overflowed = False
        # Told when the stream closes (the registry's index drops the worker at once).
        self.on_close: Callable[[], None] | None = None
        self._limit = limit
        self._queue: asyncio.Queue[object] = asyncio.Queue()

    def push(self, event: Event) -> None:
        if self.closed:
            return
        if self._queue.qsize() >= self._limit:
            self.overflowed = True
            self.close()
            return
        self.last_sent = time.monotonic()
        self._queue.put_nowait(event)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            # Drop what the reader has not taken: it ends at once instead of after the backlog.
            while not self._queue.empty():
                self._queue.get_nowait()
            self._queue.put_nowait(_CLOSE)
            if self.on_close is not None:
                self.on_close()

    async def batches(self, most: int) -> AsyncIterator[list[Event]]:
        """Every event waiting when the reader is ready (at most ``most``), in order; never an empty list.

        Nothing waits for a batch to fill: while the transport writes one batch, the next
        gathers, so a reader sees batches only when the core outpaces it.
        """
        while True:
            event = await self._queue.get()
            if event is _CLOSE:
                return
            batch = [event]
            while len(batch) < most and not self._queue.empty():
                event = self._queue.get_nowait()
                if event is _CLOSE:
                    yield batch  # type: ignore[misc]
                    return
                batch.append(event)
            yield batch  # type: ignore[misc]
