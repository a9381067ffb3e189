"""Ack deadlines: a dispatch not claimed in time goes back to the queue.

A heap of (deadline, execution, generation). Entries are never removed early:
one whose execution moved on (claimed, cancelled, dispatched again under a new
generation) is skipped when it comes due, which is cheaper than finding it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class AckDeadlines:
    def __init__(self) -> None:
        self._heap: list[tuple[float, str, int]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def start(self, execution_id: str, generation: int, deadline: float) -> None:
        heapq.heappush(self._heap, (deadline, execution_id, generation))

    def due(self, now: float) -> Iterator[tuple[str, int]]:
        """(execution_id, generation) of every deadline passed by ``now``, earliest first."""
        while self._heap and self._heap[0][0] <= now:
            _, execution_id, generation = heapq.heappop(self._heap)
            yield execution_id, generation
