"""Fire-and-forget database calls of a replica's strategies, logged when they fail, cancelled at stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("flux.replica")


class Background:
    """Fire-and-forget database calls, logged when they fail and cancelled at stop."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("replica background task failed: %s", task.exception())
