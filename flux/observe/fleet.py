"""The fleet feed: who is listening to worker and execution changes, and telling them.

``Lifecycle`` (and the dispatcher, for reports and pauses) publishes each
change here as it happens; ``ControlService.WatchFleet`` subscribes one
listener per watch. A listener runs synchronously on the event loop, so it
must only copy what it needs and queue it (the WorkerEntry it gets is live and
changes after the call). With nobody listening, a publish is one truth test:
the dispatch path pays nothing for a feature nobody uses.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any


class Change(StrEnum):
    """What happened; the values are the ``FleetEvent`` oneof names (and the SSE event names)."""

    WORKER_CONNECTED = "worker_connected"
    WORKER_DISCONNECTED = "worker_disconnected"
    WORKER_REPORTED = "worker_reported"
    WORKER_DRAINING = "worker_draining"
    WORKER_PAUSED = "worker_paused"
    WORKER_RESUMED = "worker_resumed"
    EXECUTION_QUEUED = "execution_queued"
    EXECUTION_DISPATCHED = "execution_dispatched"
    EXECUTION_FINISHED = "execution_finished"

    @property
    def about_worker(self) -> bool:
        return self.value.startswith("worker_")


# (change, subject): subject is a WorkerEntry for worker changes, an Execution otherwise.
Listener = Callable[[Change, Any], None]


class FleetFeed:
    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Start calling ``listener``; the returned function stops it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def publish(self, change: Change, subject: Any) -> None:
        if not self._listeners:
            return
        for listener in tuple(self._listeners):  # a listener may unsubscribe itself
            listener(change, subject)
