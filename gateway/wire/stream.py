"""One SSE connection relays one gRPC ``Connect`` stream; either side closing closes the other.

The gateway opens the call and reads its first event before answering, so a
refusal (unknown worker, wrong token, name held by a live stream) is an HTTP
status rather than a stream that opens and dies. After that, each
``WorkerEvent`` becomes one SSE event named after its ``oneof`` field, with
the inner message as ``data`` and a per-connection ``id`` counting from 1;
a batch of dispatches becomes one ``execution_scheduled`` event each.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from sse_starlette import ServerSentEvent

import gateway.wire.protojson as protojson
from flux.errors import Unavailable
from flux.server.metadata import TRANSPORT_METADATA
from flux.v1 import worker_pb2, worker_pb2_grpc
from gateway.wire.errors import from_rpc, from_status

log = logging.getLogger("flux.gateway")

StreamCall = grpc.aio.UnaryStreamCall


async def open_stream(
    stub: worker_pb2_grpc.WorkerServiceStub, name: str, token: str, timeout: float
) -> tuple[StreamCall, worker_pb2.WorkerEvent]:
    """The call and its ``Connected`` event, or the refusal as a ``FluxError``."""
    # Batched: dispatches the core has ready together reach the worker in one write (``_frames``).
    call = stub.Connect(
        worker_pb2.ConnectRequest(name=name, session_token=token, batched_dispatch=True),
        metadata=((TRANSPORT_METADATA, "sse"),),
    )
    first = await first_message(call, timeout)
    if first.WhichOneof("event") != "connected":
        call.cancel()
        raise Unavailable("the Flux core closed the stream before Connected")
    return call, first


async def first_message(call: StreamCall, timeout: float) -> Any:
    """A stream's first message, or the core's refusal as a ``FluxError`` (the call is cancelled then).

    Read before answering, so a refusal is an HTTP status rather than a stream that opens and dies.
    """
    try:
        first = await asyncio.wait_for(call.read(), timeout)
    except grpc.aio.AioRpcError as exc:
        raise from_rpc(exc) from None
    except TimeoutError:
        call.cancel()
        raise Unavailable(f"the Flux core did not answer within {timeout:g}s") from None
    except BaseException:
        call.cancel()
        raise
    if first is grpc.aio.EOF:
        raise Unavailable("the Flux core ended the stream before its first event")
    return first


async def opened(call: StreamCall, timeout: float) -> None:
    """Returns once the core has sent a stream's headers (it accepted the call), or raises its refusal."""
    try:
        await asyncio.wait_for(call.initial_metadata(), timeout)
    except TimeoutError:
        call.cancel()
        raise Unavailable(f"the Flux core did not answer within {timeout:g}s") from None
    except BaseException:
        call.cancel()
        raise
    if call.done():
        code = await call.code()
        if code != grpc.StatusCode.OK:
            raise from_status(code, await call.details())


def _frame(event: worker_pb2.WorkerEvent, event_id: int) -> ServerSentEvent:
    kind = event.WhichOneof("event")
    return ServerSentEvent(data=protojson.to_json(getattr(event, kind)), event=kind, id=str(event_id))


def _frames(event: worker_pb2.WorkerEvent, ids: Iterator[int]) -> ServerSentEvent | bytes:
    """One SSE event per dispatch, as the contract names them; a core batch is written at once.

    A worker reading several events from one write claims them in one call.
    """
    if event.WhichOneof("event") != "executions_scheduled":
        return _frame(event, next(ids))
    return b"".join(
        ServerSentEvent(
            data=protojson.to_json(scheduled), event="execution_scheduled", id=str(next(ids))
        ).encode()
        for scheduled in event.executions_scheduled.executions
    )


def _ping(event_id: int) -> ServerSentEvent:
    ping = worker_pb2.Ping(sent_at_ms=int(time.time() * 1000))
    return ServerSentEvent(data=protojson.to_json(ping), event="ping", id=str(event_id))


def _forget(task: asyncio.Future[object]) -> None:
    # A read cut short by call.cancel() ends in an error nobody waits for; say it was seen.
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _own_ping_after(ping_interval: float, core_ping_ms: int) -> float:
    """Seconds of silence from the core before the gateway pings the SSE stream itself."""
    if 0 < core_ping_ms <= ping_interval * 1000:
        return core_ping_ms / 1000 * 1.5
    return ping_interval


async def relay(
    call: StreamCall, connected: worker_pb2.WorkerEvent, ping_interval: float
) -> AsyncIterator[ServerSentEvent]:
    """SSE events until the core ends the stream; the client leaving cancels the call (``finally``)."""
    ids = itertools.count(1)
    # Advertise how often this stream really carries traffic: the sooner of core and gateway pings.
    core_ms = connected.connected.ping_interval_ms
    advertised = int(ping_interval * 1000)
    if core_ms > 0:
        advertised = min(advertised, core_ms)
    connected.connected.ping_interval_ms = advertised
    # The HTTP routes take no claim inside a result (CompleteItem.claim): a worker here claims on its own.
    connected.connected.claims_with_results = False
    # One ping per interval: where the core pings at least as often as this gateway would, its pings
    # are relayed and the gateway adds its own only when one is late (a wait of 1.5 intervals).
    wait = _own_ping_after(ping_interval, core_ms)
    read: asyncio.Future[object] | None = None
    try:
        yield _frame(connected, next(ids))
        while True:
            if read is None:
                read = asyncio.ensure_future(call.read())
            # Waiting on the read without cancelling it: cancelling a read cancels the call.
            done, _ = await asyncio.wait((read,), timeout=wait)
            if not done:
                yield _ping(next(ids))  # idle: keep proxies from timing the connection out
                continue
            try:
                event = read.result()
            except grpc.aio.AioRpcError as exc:
                log.info(
                    "dispatch stream of %s ended by the core: %s",
                    connected.connected.worker_name,
                    exc.code().name,
                )
                return
            finally:
                read = None
            if event is grpc.aio.EOF:
                return
            yield _frames(event, ids)  # type: ignore[arg-type]
    finally:
        if read is not None:
            _forget(read)
        call.cancel()
