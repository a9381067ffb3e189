"""``ctx.heartbeat``: what a body's heartbeats become, at most one call to the server per interval.
Its own module because a body calls it from anywhere (the loop, a thread, the child process's
pipe) and its throttling is a story apart from claiming and delivering (executions.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

from flux.worker.transport import Dispatch

log = logging.getLogger("flux.worker")


class Heartbeats:
    """``ctx.heartbeat`` of one execution: called from the body (the loop, a thread, or the child
    process's pipe), sent at most once per interval with the latest details.

    A call only stores the details and, once per interval, schedules a send on the loop, so a
    body may call it in a tight loop. The details are serialised when sent: the latest object wins.
    """

    # Without a heartbeat timeout, heartbeats only carry details for the next attempt: one a second.
    DEFAULT_INTERVAL = 1.0
    # A body's process that has not started the body by then is stuck (an import that hangs): the
    # worker stops speaking for it, and the server's heartbeat timeout counts from there.
    START_GRACE = 60.0

    def __init__(self, send: Callable[[str, int, str], Awaitable[None]], dispatch: Dispatch):
        self.send, self.dispatch = send, dispatch
        self.interval = dispatch.heartbeat_interval or self.DEFAULT_INTERVAL
        self.loop = asyncio.get_running_loop()
        self.latest: object = None
        self.raw: str | None = None  # already JSON (from the child process)
        self.scheduled = False
        self.sent_at = 0.0
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        self.start: asyncio.Task[None] | None = None  # heartbeats while a child process starts
        self.sending: asyncio.Task[None] | None = None  # the latest details' call, while in flight

    def __call__(self, details: object = None) -> None:
        self.latest, self.raw = details, None
        self._kick()

    def raw_beat(self, details_json: str) -> None:
        self.raw = details_json
        self._kick()

    def starting(self) -> None:
        """The body's process is starting: a heartbeat without details each interval until
        ``started``, for at most ``START_GRACE``.

        The server counts the heartbeat window from the claim, and starting Python, Flux and the
        workflow's module can take longer than the window on a loaded machine: the worker, which
        owns that process, speaks for it until the body runs. Nothing is sent without a heartbeat
        timeout (nobody watches for silence then).
        """
        if self.dispatch.heartbeat_interval and self.start is None and not self.closed:
            self.start = self.loop.create_task(self._vouch())

    def started(self) -> None:
        """The body starts now: one heartbeat without details, so its window counts from here.

        Empty details are "none" to the server, which keeps the last ones (what a retry resumes
        from); the body's own details waiting here go as usual.
        """
        if self.start is not None:
            self.start.cancel()
        self._alive()

    async def _vouch(self) -> None:
        for _ in range(int(self.START_GRACE / self.interval)):
            await asyncio.sleep(self.interval)
            self._alive()

    def _alive(self) -> None:
        if self.closed or not self.dispatch.heartbeat_interval:
            return
        task = self.loop.create_task(self.send(self.dispatch.execution_id, self.dispatch.generation, ""))
        task.add_done_callback(_quiet)

    def _kick(self) -> None:
        if self.scheduled or self.closed:
            return
        self.scheduled = True
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a sync body's thread
            self.loop.call_soon_threadsafe(self._schedule)
        else:
            self._schedule()

    def _schedule(self) -> None:
        delay = max(0.0, self.sent_at + self.interval - self.loop.time())
        self.timer = self.loop.call_later(delay, self._send)

    def _send(self) -> asyncio.Task[None] | None:
        self.scheduled = False
        if self.closed:
            return None
        self.sent_at = self.loop.time()
        try:
            details = self.raw if self.raw is not None else json.dumps(self.latest, allow_nan=False)
        except (TypeError, ValueError) as exc:
            log.warning("heartbeat details of %s are not JSON: %s", self.dispatch.execution_id, exc)
            details = ""
        task = self.loop.create_task(self.send(self.dispatch.execution_id, self.dispatch.generation, details))
        task.add_done_callback(_quiet)
        self.sending = task
        return task

    async def close(self) -> None:
        """No more heartbeats; the latest details, if not sent yet, are sent first, so an attempt
        that fails right after a heartbeat leaves them to the next one (ctx.last_heartbeat).

        Their call is waited for, whether sent here or already on its way: the result follows on
        another call, and a result the server reads first ends the attempt, so details that came
        after it were refused as stale (seen on PostgreSQL: a body that beat once and raised at
        once left its retry no ``last_heartbeat``)."""
        if self.start is not None:
            self.start.cancel()
        if self.scheduled and self.timer is not None:
            self.timer.cancel()
            self._send()
        self.closed = True
        sending = self.sending
        if sending is not None and not sending.done():
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(sending), 5.0)


def _quiet(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("heartbeat not delivered: %s", task.exception())
