"""Pending executions grouped by requirement shape, highest priority first, FIFO within a priority.

The dispatcher keeps one of these across cycles, so a scheduling pass walks
shapes and the heads of their queues, never the whole backlog. Within a
shape, executions sit in one FIFO bucket per priority: walking the shape
merges the buckets highest first, and the oldest execution of the shape (what
aging looks at) is the oldest of the buckets' heads. Priorities are few in
practice, so both cost O(distinct priorities), not O(backlog).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import ItemsView, Iterator
from dataclasses import dataclass
from itertools import chain

from flux.matching.shape import Shape


@dataclass(frozen=True, slots=True)
class Pending:
    execution_id: str
    shape: Shape
    # Submission order; a requeued execution keeps its original place.
    seq: int
    # Higher first; FIFO (by ``seq``) among equals.
    priority: int = 0
    # When it started waiting (its submission time): what aging measures.
    since: float = 0.0

    @property
    def order(self) -> tuple[int, int]:
        """Sort key: higher priority first, then submission order."""
        return (-self.priority, self.seq)


class _ShapeQueue:
    """One shape's pending work: a FIFO bucket per priority, priorities kept sorted high to low."""

    __slots__ = ("buckets", "priorities", "unsorted")

    def __init__(self) -> None:
        self.buckets: dict[int, OrderedDict[str, Pending]] = {}
        self.priorities: list[int] = []
        # Priorities whose bucket took items out of submission order (a requeue keeps its place; a
        # replica mirrors older rows): sorted once when next read, however many came meanwhile.
        # Sorted at each such add, a replica mirroring 20,000 rows behind newer ones sorted 20,000 times.
        self.unsorted: set[int] = set()

    def __len__(self) -> int:
        return sum(len(b) for b in self.buckets.values())

    def add(self, item: Pending) -> None:
        bucket = self.buckets.get(item.priority)
        if bucket is None:
            bucket = self.buckets[item.priority] = OrderedDict()
            self.priorities.append(item.priority)
            self.priorities.sort(reverse=True)
        last = next(reversed(bucket.values()), None)
        bucket[item.execution_id] = item
        if last is not None and last.seq > item.seq:
            self.unsorted.add(item.priority)

    def _sorted(self, priority: int) -> OrderedDict[str, Pending]:
        bucket = self.buckets[priority]
        if priority in self.unsorted:
            self.unsorted.discard(priority)
            ordered = sorted(bucket.values(), key=lambda p: p.seq)
            bucket.clear()
            bucket.update((p.execution_id, p) for p in ordered)
        return bucket

    def remove(self, item: Pending) -> None:
        bucket = self.buckets[item.priority]
        del bucket[item.execution_id]
        if not bucket:
            del self.buckets[item.priority]
            self.priorities.remove(item.priority)
            self.unsorted.discard(item.priority)

    def __iter__(self) -> Iterator[Pending]:
        return chain.from_iterable(self._sorted(p).values() for p in self.priorities)

    def oldest(self) -> Pending | None:
        heads = (next(iter(self._sorted(p).values())) for p in self.priorities)
        return min(heads, key=lambda p: p.seq, default=None)


class PendingQueue:
    """Pending work by shape, and by tenant: each tenant's shapes and its first item.

    The tenant side lets a pass over one worker start from the tenants (one entry
    each) and open a tenant's shapes only when it comes up, instead of opening
    every (tenant, shape) lane: with tenants, lanes are tenants x requirements.
    """

    def __init__(self) -> None:
        self._by_shape: dict[Shape, _ShapeQueue] = {}
        self._index: dict[str, Pending] = {}
        # Tenant -> its shapes with pending work (an ordered set).
        self._lanes: dict[str, dict[Shape, None]] = {}
        # Tenant -> its first item by (priority, submission) over all its shapes; None: recount.
        self._first: dict[str, Pending | None] = {}
        # Requirement (``Shape.needs``) -> how many shapes of it have pending work.
        self._needs: dict[Shape, int] = {}
        # Tenants whose first item left (their ``_first`` is None until recounted).
        self._stale: set[str] = set()
        # The shapes with pending work that are gangs (an ordered set): kept as shapes come and go,
        # so a pass scoped to a few workers finds them without walking every shape.
        self._gangs: dict[Shape, None] = {}

    def add(
        self, execution_id: str, shape: Shape, seq: int, priority: int = 0, since: float = 0.0
    ) -> Pending:
        self.remove(execution_id)
        item = Pending(execution_id, shape, seq, priority, since)
        queue = self._by_shape.get(shape)
        if queue is None:
            queue = self._by_shape[shape] = _ShapeQueue()
            lanes = self._lanes.get(shape.tenant)
            if lanes is None:
                lanes = self._lanes[shape.tenant] = {}
            lanes[shape] = None
            self._needs[shape.needs] = self._needs.get(shape.needs, 0) + 1
            if shape.gang is not None:
                self._gangs[shape] = None
        queue.add(item)
        self._index[execution_id] = item
        tenant = shape.tenant
        if tenant not in self._first:
            self._first[tenant] = item
        else:
            first = self._first[tenant]
            if first is not None and item.order < first.order:
                self._first[tenant] = item
        return item

    def remove(self, execution_id: str) -> Pending | None:
        item = self._index.pop(execution_id, None)
        if item is not None:
            shape = item.shape
            queue = self._by_shape[shape]
            queue.remove(item)
            if not queue.buckets:
                del self._by_shape[shape]
                self._gangs.pop(shape, None)
                lanes = self._lanes[shape.tenant]
                del lanes[shape]
                if not lanes:
                    del self._lanes[shape.tenant]
                    del self._first[shape.tenant]
                left = self._needs[shape.needs] - 1
                if left:
                    self._needs[shape.needs] = left
                else:
                    del self._needs[shape.needs]
            if self._first.get(shape.tenant) is item:
                self._first[shape.tenant] = None
                self._stale.add(shape.tenant)
        return item

    def get(self, execution_id: str) -> Pending | None:
        return self._index.get(execution_id)

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self._index

    def __len__(self) -> int:
        return len(self._index)

    def shapes(self) -> list[Shape]:
        return list(self._by_shape)

    def gang_shapes(self) -> list[Shape]:
        """The shapes with pending work whose executions are gangs."""
        return list(self._gangs)

    def count(self, shape: Shape) -> int:
        queue = self._by_shape.get(shape)
        return len(queue) if queue else 0

    def tenants(self) -> ItemsView[str, Pending]:
        """Each tenant with pending work and its first item (highest priority, then oldest).

        A view of the queue's own record (do not mutate the queue while reading it): a pass
        over one worker reads it whole, so it costs one recount per tenant whose first item
        left since the last read, and nothing per other tenant.
        """
        for tenant in self._stale:
            if tenant in self._lanes:
                self._first[tenant] = min(
                    (self.first(shape) for shape in self._lanes[tenant]),  # type: ignore[misc]
                    key=lambda item: item.order,  # type: ignore[union-attr]
                )
        self._stale.clear()
        return self._first.items()  # type: ignore[return-value]

    def lanes(self, tenant: str) -> list[Shape]:
        """The shapes of ``tenant`` with pending work."""
        return list(self._lanes.get(tenant, ()))

    def requirements(self) -> list[Shape]:
        """The distinct requirements (``Shape.needs``) with pending work, whatever the tenant."""
        return list(self._needs)

    def iter_shape(self, shape: Shape) -> Iterator[Pending]:
        """Pending items of one shape, highest priority first, oldest first within a priority.

        Do not mutate while iterating.
        """
        queue = self._by_shape.get(shape)
        return iter(queue) if queue is not None else iter(())

    def first(self, shape: Shape) -> Pending | None:
        """The item ``iter_shape`` would yield first, without starting a walk."""
        queue = self._by_shape.get(shape)
        if queue is None:
            return None
        return next(iter(queue._sorted(queue.priorities[0]).values()))

    def oldest(self, shape: Shape) -> Pending | None:
        """The execution of ``shape`` that has waited longest, whatever its priority."""
        queue = self._by_shape.get(shape)
        return queue.oldest() if queue else None

    def position(self, execution_id: str) -> int | None:
        """How many executions of the same shape are ahead of this one (O(n); for explain)."""
        item = self._index.get(execution_id)
        if item is None:
            return None
        queue = self._by_shape[item.shape]
        ahead = sum(len(queue.buckets[p]) for p in queue.priorities if p > item.priority)
        for other in queue._sorted(item.priority).values():
            if other.execution_id == execution_id:
                return ahead
            ahead += 1
        return None
