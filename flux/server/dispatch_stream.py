"""A worker's ``Connect`` stream on the wire: the session's events, written as the core pushes them.

The call itself waits for the session to end. A writer task exists only while
events wait (grpc.aio allows one write in flight per call), so an idle stream
holds one future for its whole life and nothing per ping: see
``flux.dispatcher.state.session`` for why that matters at 10,000 streams.
"""

from __future__ import annotations

import asyncio

import grpc

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.state.lifecycle import Counters
from flux.dispatcher.state.session import Scheduled, Session
from flux.server import worker_convert

# Dispatches one stream message may carry to a worker that reads ExecutionsScheduled.
DISPATCH_BATCH = 256


class DispatchStream:
    def __init__(
        self,
        dispatcher: Dispatcher,
        session: Session,
        context: grpc.aio.ServicerContext,
        batched: bool,
        counters: Counters | None = None,
    ):
        self.dispatcher = dispatcher
        self.session = session
        self.context = context
        self.batched = batched
        # Where each message written is counted (LifecycleCounters.worker_messages_sent).
        self.counters = counters
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writer: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Write events until the session closes; raises what a write (or an input's read) raised."""
        self.session.attach(self._wake)
        try:
            await self._ended
        finally:
            if self._writer is not None:
                self._writer.cancel()

    def _wake(self) -> None:
        if self.session.closed:
            if not self._ended.done():
                self._ended.set_result(None)
        elif self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        most = DISPATCH_BATCH if self.batched else 1
        counters = self.counters
        try:
            while events := self.session.take(most):
                for i, event in enumerate(events):
                    if isinstance(event, Scheduled) and not event.execution.input_json:
                        # A large input waits in the store, not in RAM: read it on its way out.
                        execution = await self.dispatcher.with_input(event.execution)
                        events[i] = event = Scheduled(execution, event.requests, event.queued)
                    if isinstance(event, Scheduled) and event.execution.after:
                        # Its dependencies' outputs (ctx.upstream), read on its way out too.
                        execution = await self.dispatcher.with_upstream(event.execution)
                        events[i] = Scheduled(execution, event.requests, event.queued)
                for message in worker_convert.events_to_proto(events, self.batched):
                    await self.context.write(message)
                    if counters is not None:
                        counters.worker_messages_sent += 1
        except Exception as exc:  # e.g. the store unavailable while an input is read
            if not self._ended.done():
                self._ended.set_exception(exc)
        finally:
            self._writer = None
