"""WatchFleet's stream: a snapshot of the workers, then every fleet change the caller may see, as
it happens; a watcher too far behind (in events or in bytes) is dropped rather than let grow. Its
own module because the backlog bookkeeping is the one stateful part of the control service.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import grpc

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.state.tenants import Caller
from flux.observe.fleet import Change
from flux.server import convert
from flux.v1 import control_pb2

# Fleet events one WatchFleet may have queued, unread, before it is dropped; and their bytes
# (serialized): one worker's report may be as large as --max-worker-metadata, so a count alone
# would let one slow watcher hold gigabytes.
FLEET_BACKLOG = 10_000
FLEET_BACKLOG_BYTES = 64 * 1024 * 1024


async def watch(
    dispatcher: Dispatcher, caller: Caller, context: grpc.aio.ServicerContext
) -> AsyncIterator[control_pb2.FleetEvent]:
    # Each event with its size in bytes (the first, the snapshot, counted as 0).
    events: asyncio.Queue[tuple[int, control_pb2.FleetEvent] | None] = asyncio.Queue()
    sequence = itertools.count(1)
    clock = dispatcher.clock
    queued = [0]  # bytes of the events in ``events``
    behind = ""

    def listen(change: Change, subject: object) -> None:
        nonlocal behind
        if not change.about_worker and not caller.sees(subject):  # type: ignore[arg-type]
            return  # another tenant's execution: a non-admin token does not see it change
        if events.qsize() >= FLEET_BACKLOG or queued[0] >= FLEET_BACKLOG_BYTES:
            behind = (
                f"{FLEET_BACKLOG} events"
                if events.qsize() >= FLEET_BACKLOG
                else f"{FLEET_BACKLOG_BYTES} bytes of events"
            )
            stop()  # too far behind: drop this watch rather than grow without bound
            events.put_nowait(None)
            return
        event = convert.fleet_event_to_proto(change, subject, next(sequence), clock())
        size = event.ByteSize()
        queued[0] += size
        events.put_nowait((size, event))

    stop = dispatcher.events.fleet.subscribe(listen)
    # Built in the same step as the subscription: no change can fall between the two.
    workers = [convert.worker_to_proto(w) for w in dispatcher.local_workers()]
    events.put_nowait(
        (
            0,
            control_pb2.FleetEvent(
                sequence=next(sequence),
                at_ms=int(clock() * 1000),
                workers=control_pb2.ListWorkersResponse(workers=workers),
            ),
        )
    )
    try:
        while (item := await events.get()) is not None:
            size, event = item
            queued[0] -= size
            yield event
    finally:
        stop()
    await context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"this fleet watch fell {behind} behind and was dropped; watch again",
    )
