"""Every deadline the dispatcher keeps, in one timer structure: ack, retry, timeout, heartbeat, pending,
stop, infeasible.

A binary heap of ``(due, sequence, kind, execution id, token)`` tuples: arming is one push and
firing one pop, O(log n) each, about 100 bytes a timer. Timers are never removed early: one
whose execution moved on (claimed, cancelled, dispatched again, another attempt) is skipped
when it comes due, by its ``token`` (the generation or attempt it was armed for), which is
cheaper than finding it in the heap. A re-armed heartbeat deadline is a new push; the old
one fires, finds a later heartbeat, and is dropped.

Firing is not left to the housekeeping tick (a second or so apart): the structure keeps one
``loop.call_later`` for its earliest deadline, moved earlier when an earlier one is armed, so
a deadline fires within a loop iteration of its time. The tick still drains what is due, which
covers a test's injected clock.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import math
from collections.abc import Callable, Iterator


class Kind(enum.IntEnum):
    ACK = 1  # a dispatch not claimed in time goes back to the queue (token: generation)
    RETRY = 2  # a failed attempt's wait is over: queue it again (token: attempt)
    TIMEOUT = 3  # an attempt ran past its timeout (token: generation)
    HEARTBEAT = 4  # an attempt may have been silent past its heartbeat timeout (token: generation)
    PENDING = 5  # an execution not started within its pending timeout (token: 0)
    STOP = 6  # a stopped attempt was not handed back in time: its room is freed (token: generation)
    INFEASIBLE = 7  # a shape infeasible for --infeasible-after (no execution id; token: the shape's entry)
    FLOW = 8  # a rate budget's next token is due (the execution id field names the budget; token: 0)


# Kind.FLOW's tokens: this server's own budget, or (replicas) the budget's bucket shared in the store.
OWN_BUCKET, SHARED_BUCKET = 0, 1


class Timers:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._heap: list[tuple[float, int, Kind, str, int]] = []
        self._sequence = itertools.count()  # ties fire in arming order; tuples never compare kinds
        self._clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._wake_at = math.inf
        # Set by the dispatcher: what to do with the timers that came due (and the time).
        self.on_due: Callable[[float], None] | None = None

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, kind: Kind, execution_id: str, token: int, due: float) -> None:
        heapq.heappush(self._heap, (due, next(self._sequence), kind, execution_id, token))
        if due < self._wake_at:
            self._schedule(due)

    # The name the ack path used before the other kinds shared the structure.
    def start(self, execution_id: str, generation: int, deadline: float) -> None:
        self.arm(Kind.ACK, execution_id, generation, deadline)

    def due(self, now: float) -> Iterator[tuple[Kind, str, int]]:
        """(kind, execution id, token) of every timer passed by ``now``, earliest first."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, kind, execution_id, token = heapq.heappop(heap)
            yield kind, execution_id, token

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def _schedule(self, due: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a pure test): the tick drains what is due
            return
        if self._handle is not None:
            self._handle.cancel()
        self._wake_at = due
        self._handle = loop.call_later(max(0.0, due - self._clock()), self._fire)

    def _fire(self) -> None:
        self._handle, self._wake_at = None, math.inf
        if self.on_due is not None:
            self.on_due(self._clock())
        head = self.next_due()
        if head is not None:
            self._schedule(head)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._wake_at = math.inf
