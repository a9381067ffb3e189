"""Who watches which execution: each watcher gets every state change, in order.

Wake-ups are for replicas: a change made elsewhere arrives as a NOTIFY without
the new state, and the watcher rereads it from the database.
"""

from __future__ import annotations

import asyncio

from flux.domain.execution import Execution


class Watchers:
    def __init__(self) -> None:
        self._queues: dict[str, set[asyncio.Queue[Execution]]] = {}
        self._wakeups: dict[str, asyncio.Event] = {}

    def __len__(self) -> int:
        return len(self._queues)

    def subscribe(self, execution_id: str) -> asyncio.Queue[Execution]:
        updates: asyncio.Queue[Execution] = asyncio.Queue()
        self._queues.setdefault(execution_id, set()).add(updates)
        return updates

    def subscribe_many(self, execution_ids: list[str], updates: asyncio.Queue[Execution]) -> None:
        """One queue for the changes of many executions (a wait on a whole batch)."""
        queues = self._queues
        for execution_id in execution_ids:
            queues.setdefault(execution_id, set()).add(updates)

    def unsubscribe_many(self, execution_ids: list[str], updates: asyncio.Queue[Execution]) -> None:
        for execution_id in execution_ids:
            self.unsubscribe(execution_id, updates)

    def unsubscribe(self, execution_id: str, updates: asyncio.Queue[Execution]) -> None:
        queues = self._queues.get(execution_id)
        if queues is None:
            return
        queues.discard(updates)
        if not queues:
            del self._queues[execution_id]
            self._wakeups.pop(execution_id, None)

    def notify(self, execution: Execution) -> None:
        for updates in self._queues.get(execution.execution_id, ()):
            updates.put_nowait(execution)

    def wakeup(self, execution_id: str) -> asyncio.Event:
        return self._wakeups.setdefault(execution_id, asyncio.Event())

    def wake(self, execution_id: str) -> None:
        event = self._wakeups.get(execution_id)
        if event is not None:
            event.set()
