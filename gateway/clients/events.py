"""Observer streams over SSE: one execution's events, and the fleet's.

``GET /executions/{id}/events`` relays ``ControlService.WatchExecution``: the
current state, then every change, ending after a final state. Each event's
``id`` is derived from the execution itself (its dispatch generation and how
far that dispatch got), not from the connection, so it means the same at
every gateway and after a restart: a client that reconnects with
``Last-Event-ID`` gets only what it has not seen, and one that already saw
the final state gets 204, which tells an EventSource to stop reconnecting.

``POST /workflows/{name}/run`` with ``Accept: text/event-stream`` relays one
``RunAndWait`` call the same way (the accepted state first), and ``POST
/executions/wait`` relays ``WaitExecutions``: each final state of a batch, in the
order they finish.

``GET /events`` relays ``ControlService.WatchFleet``: a ``workers`` event with
the whole fleet, then one event per change, named after the change.

Both read the core's first event before answering, so a refusal (no token,
unknown execution) is an HTTP status rather than a stream that opens and dies.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import grpc
from fastapi import APIRouter, Header, Path, Query, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from flux.errors import InvalidArgument
from flux.v1 import control_pb2
from gateway.core import Core
from gateway.security import FLEET_SCOPE, access_for, execution_scope
from gateway.wire import first_message, opened, protojson, schema

router = APIRouter(tags=["streams"])

_S = control_pb2
FINISHED = _S.EXECUTION_STATE_COMPLETED
# How far one dispatch got, in the order a watcher sees it: a requeued execution is
# CREATED again under the generation of the dispatch it left, after that dispatch.
_RANK = {_S.EXECUTION_STATE_SCHEDULED: 1, _S.EXECUTION_STATE_RUNNING: 2}

ExecutionEventId = tuple[int, int]

EXECUTION_EVENTS_DOC = (
    "Server-Sent Events, all named `execution`: the current state first, then every change; the "
    "stream ends after a final state (COMPLETED, FAILED, CANCELLED). Each `data` is one `flux.v1."
    "Execution` in the proto3 JSON mapping. Each `id` (`GENERATION.STEP`) comes from the execution, "
    "so reconnecting with `Last-Event-ID` (or `?last_event_id=`) resumes after it at any gateway; "
    "when that id is already the final state, the answer is 204 (EventSource then stops)."
)
FINALS_DOC = (
    "Server-Sent Events, all named `execution`: one per execution asked for, its final state "
    "(COMPLETED, FAILED, CANCELLED) as a `flux.v1.Execution` without `input_json`, in the order they "
    "finish (those already finished first); the stream ends after the last. `id` counts up from 1 "
    "per connection; after a dropped connection, ask again for the ids not yet seen."
)
FLEET_EVENTS_DOC = (
    "Server-Sent Events: `workers` first (every known worker, a `ListWorkersResponse`), then one "
    "event per change: `worker_connected`, `worker_disconnected`, `worker_reported`, "
    "`worker_draining`, `worker_paused`, `worker_resumed` (each a `WorkerInfo`), and "
    "`execution_queued`, `execution_dispatched`, `execution_finished` (each an `Execution` without "
    "`input_json`/`output_json`). Each `data` is that message with `at_ms` (when the core saw the change, Unix ms) added. `id` counts up from 1 per connection; the feed does not replay, "
    "so a reconnect starts again with `workers`."
)
_REFUSALS = schema.refusals(
    {
        401: "no credentials, or the ticket is unknown, expired or already used",
        403: "the token cannot watch this, or the ticket is for another stream",
        404: "unknown execution",
        422: "invalid path, query or Last-Event-ID",
        503: "the core is unreachable",
    }
)


def event_id(execution: control_pb2.Execution) -> ExecutionEventId:
    """Orders every state an execution goes through, across requeues; the same at every gateway."""
    state, generation = execution.state, execution.generation
    if state >= FINISHED:
        return generation, 4
    if state == _S.EXECUTION_STATE_CREATED:
        return generation, 0 if generation == 0 else 3
    return generation, _RANK.get(state, 0)


def format_id(key: ExecutionEventId) -> str:
    return f"{key[0]}.{key[1]}"


def parse_id(text: str | None) -> ExecutionEventId | None:
    if not text:
        return None
    generation, dot, step = text.strip().partition(".")
    if len(text) > 64 or not (dot and generation.isdigit() and step.isdigit()):
        raise InvalidArgument(
            f"Last-Event-ID {text[:40]!r} is not an id of this stream; ids look like '2.1' (GENERATION.STEP)"
        )
    return int(generation), int(step)


def _execution_event(execution: control_pb2.Execution, key: ExecutionEventId) -> ServerSentEvent:
    return ServerSentEvent(data=protojson.to_json(execution), event="execution", id=format_id(key))


async def _executions(
    call: grpc.aio.UnaryStreamCall, first: control_pb2.Execution, after: ExecutionEventId | None
) -> AsyncIterator[ServerSentEvent]:
    """Every state newer than ``after``, until a final one; the client leaving cancels the call."""
    try:
        update: Any = first
        while True:
            key = event_id(update)
            if after is None or key > after:
                after = key
                yield _execution_event(update, key)
            if update.state >= FINISHED:
                return
            try:
                update = await call.read()
            except grpc.aio.AioRpcError:
                return  # the core went away: the client reconnects with Last-Event-ID
            if update is grpc.aio.EOF:
                return
    finally:
        call.cancel()


def _stream(request: Request, events: AsyncIterator[ServerSentEvent], call: Any) -> EventSourceResponse:
    settings = request.app.state.settings
    return EventSourceResponse(
        events,
        ping=int(settings.ping_interval),  # comment lines: they keep proxies open and carry no id
        send_timeout=settings.send_timeout,
        background=BackgroundTask(call.cancel),
    )


async def stream_execution(
    request: Request, core: Core, execution_id: str, after: ExecutionEventId | None = None
) -> Response:
    """The execution's events after ``after``, or 204 when the client has seen its final state."""
    call = core.control.WatchExecution(control_pb2.WatchExecutionRequest(execution_id=execution_id))
    first = await first_message(call, request.app.state.settings.connect_timeout)
    if first.state >= FINISHED and after is not None and event_id(first) <= after:
        call.cancel()
        return Response(status_code=204)
    return _stream(request, _executions(call, first, after), call)


async def run_and_stream(request: Request, core: Core, run: control_pb2.RunWorkflowRequest) -> Response:
    """Run-and-stream over one ``RunAndWait`` call: the execution as accepted, then every change.

    The receipt is read before answering, so a refused run is an HTTP status.
    """
    call = core.control.RunAndWait(control_pb2.RunAndWaitRequest(run=run, every_state=True))
    accepted = await first_message(call, request.app.state.settings.unary_timeout)
    return _stream(request, _executions(call, accepted, None), call)


async def stream_finals(request: Request, core: Core, execution_ids: list[str]) -> Response:
    """One ``WaitExecutions`` call as SSE: an ``execution`` event per final state, in completion order.

    The core sends its headers once the ids are accepted, so a refusal (an unknown id) is an
    HTTP status here, and the 200 does not wait for the first execution to finish.
    """
    call = core.control.WaitExecutions(control_pb2.WaitExecutionsRequest(execution_ids=execution_ids))
    await opened(call, request.app.state.settings.connect_timeout)
    return _stream(request, _finals(call), call)


async def _finals(call: grpc.aio.UnaryStreamCall) -> AsyncIterator[ServerSentEvent]:
    try:
        sequence = 0
        while True:
            try:
                batch = await call.read()
            except grpc.aio.AioRpcError:
                return  # the core went away: the client asks again for those it has not seen
            if batch is grpc.aio.EOF:
                return
            for execution in batch.executions:
                sequence += 1
                yield ServerSentEvent(data=protojson.to_json(execution), event="execution", id=str(sequence))
    finally:
        call.cancel()


@router.get(
    "/executions/{execution_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": EXECUTION_EVENTS_DOC},
        204: {"description": "the Last-Event-ID given is the execution's final state: nothing more"},
        **_REFUSALS,
    },
)
async def execution_events(
    # No length bound here: the core checks the id after the caller's access, so a caller
    # with a ticket and a bad id hears 401/403 for the ticket first, as one without any token.
    execution_id: Annotated[str, Path(description="the id RunWorkflow returned")],
    request: Request,
    # Checked by parse_id, after the caller's access: a caller without it hears 401, whatever else it sent.
    last_event_id: Annotated[
        str | None,
        Query(description="resume after this id, GENERATION.STEP (for clients that cannot set it)"),
    ] = None,
    last_event_id_header: Annotated[
        str | None, Header(alias="Last-Event-ID", description="resume after this id (EventSource sets it)")
    ] = None,
) -> Response:
    """Follow one execution to its final state (API token, or a ticket for this execution)."""
    access = access_for(request, execution_scope(execution_id))
    core = request.app.state.core.for_caller(access.authorization)
    after = parse_id(last_event_id_header or last_event_id)
    return await stream_execution(request, core, execution_id, after)


def _fleet_event(event: control_pb2.FleetEvent) -> ServerSentEvent:
    kind = event.WhichOneof("event") or "unknown"
    data = protojson.to_dict(getattr(event, kind))
    return ServerSentEvent(
        data=json.dumps({"at_ms": str(event.at_ms), **data}, separators=(",", ":")),
        event=kind,
        id=str(event.sequence),
    )


async def _fleet(
    call: grpc.aio.UnaryStreamCall, first: control_pb2.FleetEvent
) -> AsyncIterator[ServerSentEvent]:
    try:
        event: Any = first
        while True:
            yield _fleet_event(event)
            try:
                event = await call.read()
            except grpc.aio.AioRpcError:
                return  # dropped as too slow, or the core went away: the client reconnects
            if event is grpc.aio.EOF:
                return
    finally:
        call.cancel()


@router.get(
    "/events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": FLEET_EVENTS_DOC}, **_REFUSALS},
)
async def fleet_events(request: Request) -> Response:
    """The fleet as it changes: the feed a dashboard draws from (API token, or a fleet ticket)."""
    access = access_for(request, FLEET_SCOPE)
    core = request.app.state.core.for_caller(access.authorization)
    call = core.control.WatchFleet(control_pb2.WatchFleetRequest())
    first = await first_message(call, request.app.state.settings.connect_timeout)
    return _stream(request, _fleet(call, first), call)
