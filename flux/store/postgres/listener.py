"""The LISTEN connection: the other replicas' notices, as they arrive, to the dispatcher's callback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from flux.store import notices

# Named as the store's logger: its records keep the name they had before this moved out of store.py.
log = logging.getLogger("flux.store.postgres")


class Listener:
    def __init__(self, url: str):
        self.url = url
        self.on_notify: Callable[[notices.Notice], None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # Subscribed before the caller reads the queue, so nothing announced after that read is missed.
        self._conn = await self._subscribed()
        self._task = asyncio.get_running_loop().create_task(self._listen())

    async def stop(self) -> None:
        """Stop handing on notices (the connection stays open until ``close``)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()

    async def _subscribed(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        for channel in notices.CHANNELS:
            await conn.execute(f"LISTEN {channel}")
        return conn

    async def _listen(self) -> None:
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = await self._subscribed()
                async for notice in self._conn.notifies():
                    if self.on_notify is not None:
                        try:
                            self.on_notify(notices.parse(notice.channel, notice.payload))
                        except Exception:  # one bad notification must not stop the rest
                            log.exception("handling a %s notification failed", notice.channel)
            except psycopg.OperationalError as exc:
                # The database went away: listen again once it is back. What was announced
                # meanwhile is found by the replicas' safety tick, which rereads the queue.
                log.warning("lost the LISTEN connection (%s); reconnecting", exc)
                if self._conn is not None:
                    await self._conn.close()
                self._conn = None
                await asyncio.sleep(1.0)
