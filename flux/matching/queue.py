"""Pending executions, FIFO by submission, grouped by requirement shape.

The dispatcher keeps one of these across cycles, so a scheduling pass walks
shapes and the heads of their queues, never the whole backlog.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from flux.matching.shape import Shape


@dataclass(frozen=True, slots=True)
class Pending:
    execution_id: str
    shape: Shape
    # Submission order; a requeued execution keeps its original place.
    seq: int


class PendingQueue:
    def __init__(self) -> None:
        # OrderedDict, not dict: removing from the front of a plain dict leaves
        # holes that every later iteration has to skip over.
        self._by_shape: dict[Shape, OrderedDict[str, Pending]] = {}
        self._index: dict[str, Pending] = {}

    def add(self, execution_id: str, shape: Shape, seq: int) -> Pending:
        self.remove(execution_id)
        item = Pending(execution_id, shape, seq)
        queue = self._by_shape.setdefault(shape, OrderedDict())
        last = next(reversed(queue.values()), None)
        queue[execution_id] = item
        if last is not None and last.seq > seq:
            # A requeued execution keeps its original place; rare, so re-sort.
            ordered = sorted(queue.values(), key=lambda p: p.seq)
            queue.clear()
            queue.update((p.execution_id, p) for p in ordered)
        self._index[execution_id] = item
        return item

    def remove(self, execution_id: str) -> Pending | None:
        item = self._index.pop(execution_id, None)
        if item is not None:
            queue = self._by_shape[item.shape]
            del queue[execution_id]
            if not queue:
                del self._by_shape[item.shape]
        return item

    def get(self, execution_id: str) -> Pending | None:
        return self._index.get(execution_id)

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self._index

    def __len__(self) -> int:
        return len(self._index)

    def shapes(self) -> list[Shape]:
        return list(self._by_shape)

    def count(self, shape: Shape) -> int:
        queue = self._by_shape.get(shape)
        return len(queue) if queue else 0

    def iter_shape(self, shape: Shape) -> Iterator[Pending]:
        """Pending items of one shape, oldest first. Do not mutate while iterating."""
        queue = self._by_shape.get(shape)
        return iter(queue.values()) if queue else iter(())

    def position(self, execution_id: str) -> int | None:
        """How many executions of the same shape are ahead of this one (O(n); for explain)."""
        item = self._index.get(execution_id)
        if item is None:
            return None
        for ahead, other in enumerate(self._by_shape[item.shape].values()):
            if other.execution_id == execution_id:
                return ahead
        return None
