"""Worker routes: the ``WorkerService`` over HTTP, with dispatch pushed as Server-Sent Events.

The worker's session token (from ``POST /workers/register``) travels in the
``X-Flux-Session`` header. An EventSource, which cannot set headers, opens
``GET /workers/{name}/connect`` with a ``?ticket=`` minted for it instead
(``gateway.security.tickets``), so no token goes in a URL (``?session_token=``, once
accepted there, is gone: a token in a URL ends up in proxy and access logs). The
worker name and execution id come from the path, so bodies leave those
fields out (and are refused if they carry them).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Path, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from flux.defaults import MAX_BATCH_ITEMS
from flux.errors import Unauthenticated
from flux.server.metadata import TRANSPORT_METADATA
from flux.v1 import worker_pb2
from gateway.core import Core, core
from gateway.security import SESSION_HEADER, WORKER_BEARER, access_for, worker_scope
from gateway.wire import OffLoopJSONRoute, open_stream, protojson, relay, schema, sized_to, to_message

log = logging.getLogger("flux.gateway")

# Every worker route takes the worker token (checked from the headers by gateway.security.auth, before the body).
router = APIRouter(
    prefix="/workers", tags=["workers"], dependencies=[Depends(WORKER_BEARER)], route_class=OffLoopJSONRoute
)

_REFUSALS = schema.refusals(
    {
        401: "no worker token or session token, or a worker token that is not valid",
        403: "the API token instead of the worker token, or a session token that does not match the worker",
        404: "unknown worker or execution",
        409: "stale generation, wrong state, or the name is held by a live stream",
        413: "the body is over the size limit",
        422: "invalid body or path",
        503: "the core is unreachable",
    }
)

WorkerName = Annotated[str, Path(description="registered worker name", max_length=63)]
ExecutionId = Annotated[str, Path(max_length=128)]
CoreDep = Annotated[Core, Depends(core)]


def _token(value: str | None) -> str:
    if not value:
        raise Unauthenticated(
            f"the {SESSION_HEADER} header is missing; send the token POST /workers/register returned"
        )
    return value


async def session(
    x_flux_session: Annotated[str | None, Header(description="session token from register")] = None,
) -> str:
    return _token(x_flux_session)


Token = Annotated[str, Depends(session)]


def _timeout(request: Request) -> float:
    return request.app.state.settings.unary_timeout


def _answer(message: object) -> JSONResponse:
    return JSONResponse(protojson.to_dict(message))  # type: ignore[arg-type]


@router.post("/register", response_model=schema.RegisterResponse, responses=_REFUSALS)
async def register(body: schema.RegisterRequest, request: Request, core: CoreDep) -> JSONResponse:
    """Announce a worker and what it offers; the answer's `session_token` goes in `X-Flux-Session`."""
    message = await to_message(body.to_json_dict(), worker_pb2.RegisterRequest(), request)
    if not message.advertise_address and request.client is not None:
        # Gang members reach it where it connected from: the core only sees this gateway.
        message.advertise_address = request.client.host
    answer = await core.workers.Register(
        message, metadata=((TRANSPORT_METADATA, "sse"),), timeout=_timeout(request)
    )
    return _answer(answer)


@router.get(
    "/{name}/connect",
    response_class=EventSourceResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": (
                "Server-Sent Events: `connected` first, then `execution_scheduled`, `execution_cancelled` "
                "and `ping`. Each `data` is one JSON object (the flux.v1 message of the same name); "
                "each event has an `id` that counts up from 1 on this connection."
            ),
        },
        **_REFUSALS,
    },
)
async def connect(
    name: WorkerName,
    request: Request,
    x_flux_session: Annotated[str | None, Header(description="session token from register")] = None,
) -> EventSourceResponse:
    """The dispatch stream. Closing it ends the worker's stream on the core; the core ending it closes it.

    A client that cannot set headers (EventSource) passes `?ticket=` from POST /tickets instead.
    """
    settings = request.app.state.settings
    access = access_for(request, worker_scope(name))
    # The ticket's session when a ticket opens the stream, else the X-Flux-Session header's.
    token = _token(access.session_token)
    core = request.app.state.core.for_caller(access.authorization)
    call, connected = await open_stream(core.workers, name, token, settings.connect_timeout)
    return EventSourceResponse(
        relay(call, connected, settings.ping_interval),
        ping=0,  # the relay pings only when idle, as a named `ping` event with an id
        send_timeout=settings.send_timeout,
        # Also when the body never runs (a response cut short before streaming).
        background=BackgroundTask(call.cancel),
    )


@router.post("/{name}/resources", status_code=200, responses=_REFUSALS)
async def report_resources(
    name: WorkerName, body: schema.ReportResourcesBody, token: Token, request: Request, core: CoreDep
) -> JSONResponse:
    """Replace the worker's observed resources (and software, when given); `draining` stops new dispatch."""
    message = await to_message(body.to_json_dict(), worker_pb2.ReportResourcesRequest(), request)
    message.name, message.session_token = name, token
    return _answer(await core.workers.ReportResources(message, timeout=_timeout(request)))


async def _for_execution(
    rpc: Any, message: Any, body: Any, name: str, token: str, execution_id: str, request: Request
) -> JSONResponse:
    """Claim, complete and release: the body, plus who is asking and about which execution."""
    message = await to_message(body.to_json_dict(), message, request)
    message.name, message.session_token, message.execution_id = name, token, execution_id
    return _answer(await rpc(message, timeout=_timeout(request)))


@router.post("/{name}/claim/{execution_id}", responses=_REFUSALS)
async def claim(
    name: WorkerName,
    execution_id: ExecutionId,
    body: schema.ClaimBody,
    token: Token,
    request: Request,
    core: CoreDep,
) -> JSONResponse:
    """Acknowledge a dispatch (SCHEDULED -> RUNNING), quoting the `generation` of its event."""
    return await _for_execution(
        core.workers.Claim, worker_pb2.ClaimRequest(), body, name, token, execution_id, request
    )


@router.post("/{name}/complete/{execution_id}", responses=_REFUSALS)
async def complete(
    name: WorkerName,
    execution_id: ExecutionId,
    body: schema.CompleteBody,
    token: Token,
    request: Request,
    core: CoreDep,
) -> JSONResponse:
    """Record the result: `output_json` (a JSON text) or `error`, exactly one."""
    return await _for_execution(
        core.workers.Complete, worker_pb2.CompleteRequest(), body, name, token, execution_id, request
    )


@router.post("/{name}/release/{execution_id}", responses=_REFUSALS)
async def release(
    name: WorkerName,
    execution_id: ExecutionId,
    body: schema.ReleaseBody,
    token: Token,
    request: Request,
    core: CoreDep,
) -> JSONResponse:
    """Hand an execution back unrun; it returns to CREATED and its reservation is released."""
    return await _for_execution(
        core.workers.Release, worker_pb2.ReleaseRequest(), body, name, token, execution_id, request
    )


@router.post("/{name}/heartbeat/{execution_id}", responses=_REFUSALS)
async def heartbeat(
    name: WorkerName,
    execution_id: ExecutionId,
    body: schema.HeartbeatBody,
    token: Token,
    request: Request,
    core: CoreDep,
) -> JSONResponse:
    """Say a running execution is alive, quoting its `generation`, with the latest `details_json`."""
    return await _for_execution(
        core.workers.Heartbeat, worker_pb2.HeartbeatRequest(), body, name, token, execution_id, request
    )


ClaimItems = Annotated[
    list[schema.ClaimItem],  # type: ignore[valid-type]
    Body(min_length=1, max_length=MAX_BATCH_ITEMS, description="the dispatches claimed, answered in order"),
]
CompletionItems = Annotated[
    list[schema.CompletionItem],  # type: ignore[valid-type]
    Body(min_length=1, max_length=MAX_BATCH_ITEMS, description="the results, answered in order"),
]
_BATCH_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "model": list[schema.ItemAnswer],  # type: ignore[valid-type]
        "description": "one answer per item, in order: `ok`, or the refusal's `code` and `message` as the "
        "single route would have answered it",
    },
    **_REFUSALS,
}


def _answers(response: Any) -> JSONResponse:
    return JSONResponse([protojson.to_dict(answer) for answer in response.answers])


@router.post("/{name}/claims", responses=_BATCH_ANSWERS)
async def claims(
    name: WorkerName, body: ClaimItems, token: Token, request: Request, core: CoreDep
) -> JSONResponse:
    """Acknowledge several dispatches in one call, each fenced and answered as `/claim` would answer it.

    A refused item does not affect the others.
    """

    def convert() -> worker_pb2.ClaimBatchRequest:
        message = worker_pb2.ClaimBatchRequest(name=name, session_token=token)
        for i, item in enumerate(body):
            protojson.from_dict(item.to_json_dict(), message.items.add(), f"body[{i}]")
        return message

    message = await sized_to(request, convert)
    return _answers(await core.workers.ClaimBatch(message, timeout=_timeout(request)))


@router.post("/{name}/completions", responses=_BATCH_ANSWERS)
async def completions(
    name: WorkerName, body: CompletionItems, token: Token, request: Request, core: CoreDep
) -> JSONResponse:
    """Record several results in one call, each answered as `/complete` would answer it, in order.

    Each item is a `/complete` body plus its `execution_id`. One `resources` report travels for the
    batch: the last item's that carries one. Every accepted result is stored before the answer.
    """

    def convert() -> worker_pb2.CompleteBatchRequest:
        message = worker_pb2.CompleteBatchRequest(name=name, session_token=token)
        for i, item in enumerate(body):
            single = protojson.from_dict(item.to_json_dict(), worker_pb2.CompleteRequest(), f"body[{i}]")
            batched = message.items.add(execution_id=single.execution_id, generation=single.generation)
            if single.HasField("error"):
                batched.error.CopyFrom(single.error)
            elif single.HasField("output_json"):
                batched.output_json = single.output_json
            if single.HasField("resources"):
                message.resources.CopyFrom(single.resources)
        return message

    message = await sized_to(request, convert)
    return _answers(await core.workers.CompleteBatch(message, timeout=_timeout(request)))


@router.get("/{name}/source/{source_hash}", response_model=schema.WorkflowSource, responses=_REFUSALS)
async def workflow_source(
    name: WorkerName,
    source_hash: Annotated[str, Path(max_length=64)],
    token: Token,
    request: Request,
    core: CoreDep,
) -> JSONResponse:
    """A registered workflow file by its sha256, as dispatches name it in `workflow.source_hash`."""
    message = worker_pb2.GetWorkflowSourceRequest(name=name, session_token=token, source_hash=source_hash)
    return _answer(await core.workers.GetWorkflowSource(message, timeout=_timeout(request)))
