"""Client routes: the ``ControlService`` as REST, bodies and answers in the proto3 JSON mapping."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import grpc
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from flux.defaults import MAX_BATCH_INPUTS
from flux.domain.policy import Retry, parse_duration, retry_to_proto
from flux.errors import InvalidArgument, ResourceExhausted
from flux.server.metadata import CALLER_ROLE, CALLER_TENANT
from flux.v1 import control_pb2
from gateway.clients.events import FINALS_DOC, run_and_stream, stream_finals
from gateway.core import Core, core
from gateway.observe import tracing
from gateway.security import API_BEARER
from gateway.wire import (
    OffLoopJSONRoute,
    first_message,
    from_rpc,
    large_json_dumps,
    large_json_dumps_each,
    protojson,
    schema,
    to_message,
)

# Every client route takes the API token (checked from the headers by gateway.security.auth, before the body).
router = APIRouter(tags=["clients"], dependencies=[Depends(API_BEARER)], route_class=OffLoopJSONRoute)

CoreDep = Annotated[Core, Depends(core)]
WorkerName = Annotated[str, Path(description="worker name, as in GET /workers", max_length=63)]
ExecutionId = Annotated[str, Path(description="the id RunWorkflow returned", max_length=128)]
FINISHED = control_pb2.EXECUTION_STATE_COMPLETED


_WHY = {
    401: "no API token, or not a valid one",
    403: "a valid token of another kind (the worker token)",
    404: "no such workflow, execution or worker",
    409: "the execution has already finished",
    413: "the body is over the size limit, or the core's queue is full",
    422: "invalid body, path or query",
    503: "the core is unreachable",
}


def _refusals(*statuses: int) -> dict[int | str, dict[str, object]]:
    return schema.refusals({status: _WHY[status] for status in {401, 403, *statuses, 422, 503}})


def _timeout(request: Request) -> float:
    return request.app.state.settings.unary_timeout


def _answer(message: object, status: int = 200) -> JSONResponse:
    return JSONResponse(protojson.to_dict(message), status_code=status)  # type: ignore[arg-type]


@router.post("/workflows", response_model=schema.RegisterWorkflowResponse, responses=_refusals(413))
async def register_workflows(
    body: schema.RegisterWorkflowRequest, request: Request, core: CoreDep
) -> JSONResponse:
    """Register every workflow of one source file; each registration is a new version."""
    message = await to_message(body.to_json_dict(), control_pb2.RegisterWorkflowRequest(), request)
    return _answer(await core.control.RegisterWorkflow(message, timeout=_timeout(request)))


@router.post(
    "/workflows/{name}/run",
    response_model=schema.Execution,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "with `wait`, the finished execution; with `Accept: text/event-stream`, "
            "its events (as GET /executions/{execution_id}/events, the accepted state first)",
        },
        202: {"model": schema.Execution, "description": "accepted, not finished yet"},
        **_refusals(404, 413),
    },
)
async def run_workflow(
    name: Annotated[str, Path(description="registered workflow name")],
    body: schema.RunBody,
    request: Request,
    core: CoreDep,
) -> Response:
    """Submit an execution: 202 with it as accepted, or with `wait` 200 once it is finished.

    A wait that runs out of `timeout` answers 202 with the execution as it is then. With
    `Accept: text/event-stream` it runs and streams in one call: the execution's events until its
    final state (resume a dropped stream with GET /executions/{execution_id}/events).
    """
    run = control_pb2.RunWorkflowRequest(
        workflow_name=name, input_json=await large_json_dumps(body.input, request), version=body.version
    )
    if body.priority is not None:
        run.priority = body.priority
    if body.key is not None:
        run.key = body.key
    if body.gang_size is not None:
        run.gang_size = body.gang_size
    run.after.extend(body.after)
    run.when = body.when or ""
    _policy(run, body)
    # The caller's trace context (or the gateway's span) goes with each call made in here.
    with tracing.submitting(request, "/workflows/{name}/run"):
        if "text/event-stream" in request.headers.get("accept", ""):
            return await run_and_stream(request, core, run)
        if not body.wait:
            return _answer(await core.control.RunWorkflow(run, timeout=_timeout(request)), 202)
        latest = await _until_finished_or_gone(core, run, body.timeout, request)
    if latest is None:  # the client left; nobody reads an answer
        return JSONResponse(None, status_code=202)
    return _answer(latest, 200 if latest.state >= FINISHED else 202)


def _policy(run: control_pb2.RunWorkflowRequest, body: schema.RunBody) -> None:
    """The run's attempt timeout and retry policy, checked as the Python client checks them."""
    try:
        if body.attempt_timeout is not None:
            run.attempt_timeout_s = parse_duration(body.attempt_timeout, "attempt_timeout")
        if body.retry is not None:
            run.retry.CopyFrom(retry_to_proto(Retry(**body.retry.model_dump())))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None


@router.post(
    "/workflows/{name}/run-many",
    response_model=schema.RunWorkflowsResponse,
    status_code=202,
    responses=_refusals(404, 413),
)
async def run_workflows(
    name: Annotated[str, Path(description="registered workflow name")],
    body: schema.RunManyBody,
    request: Request,
    core: CoreDep,
) -> JSONResponse:
    """Submit one execution per input (RunWorkflows): 202 with them in input order, as accepted.

    All are stored in one commit before the answer, or none is: a bad input refuses the call,
    naming its index (`inputs[3]`). Each is its own execution; follow each as after a run.
    More than 10,000 inputs answer 413: send them in several calls.
    """
    if len(body.inputs) > MAX_BATCH_INPUTS:
        raise ResourceExhausted(
            f"inputs has {len(body.inputs)} values; the limit is {MAX_BATCH_INPUTS} per call: "
            "send the rest in further calls"
        )
    encoded = await large_json_dumps_each(body.inputs, request)
    run = control_pb2.RunWorkflowsRequest(workflow_name=name, input_json=encoded, version=body.version)
    if body.priority is not None:
        run.priority = body.priority
    if body.key is not None:
        run.key = body.key
    run.after.extend(body.after)
    run.when = body.when or ""
    run.batch = body.batch
    if body.max_concurrent is not None:
        run.max_concurrent = body.max_concurrent
    if body.batch_id is not None:
        run.batch_id = body.batch_id
    try:
        with tracing.submitting(request, "/workflows/{name}/run-many"):
            accepted = await core.control.RunWorkflows(run, timeout=_timeout(request))
    except grpc.aio.AioRpcError as exc:
        error = from_rpc(exc)
        # The core names an input as input_json[i]; this body calls them inputs.
        raise type(error)(str(error).replace("input_json", "inputs")) from None
    return _answer(accepted, 202)


async def _run_and_follow(
    core: Core, run: control_pb2.RunWorkflowRequest, timeout: float, unary_timeout: float
) -> control_pb2.Execution:
    """One RunAndWait call: the final state, or the latest seen once ``timeout`` runs out.

    The receipt may take as long as any call; the wait's timeout counts once it is accepted.
    """
    call = core.control.RunAndWait(control_pb2.RunAndWaitRequest(run=run, every_state=True))
    try:
        latest = await first_message(call, unary_timeout)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while latest.state < FINISHED:
                    update = await call.read()
                    if update is grpc.aio.EOF:
                        break
                    latest = update
        return latest
    except grpc.aio.AioRpcError as exc:
        raise from_rpc(exc) from None
    finally:
        call.cancel()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _until_finished_or_gone(
    core: Core, run: control_pb2.RunWorkflowRequest, timeout: float, request: Request
) -> control_pb2.Execution | None:
    # A long wait must not outlive its client: stop following once the connection drops.
    follow = asyncio.ensure_future(_run_and_follow(core, run, timeout, _timeout(request)))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((follow, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (follow, gone):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return follow.result() if follow.done() and not follow.cancelled() else None


@router.post(
    "/executions/wait",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": FINALS_DOC}, **_refusals(404)},
)
async def wait_executions(body: schema.WaitBody, request: Request, core: CoreDep) -> Response:
    """Wait for many executions in one stream: each one's final state as it finishes (WaitExecutions)."""
    return await stream_finals(request, core, body.execution_ids)


_STATE_NAMES = [n.removeprefix("EXECUTION_STATE_") for n in control_pb2.ExecutionState.keys()[1:]]


def _states(values: list[str]) -> list[int]:
    states = []
    for value in values:
        name = value.strip().upper().removeprefix("EXECUTION_STATE_")
        if name not in _STATE_NAMES:
            raise InvalidArgument(f"state {value!r} is not a state; use one of {', '.join(_STATE_NAMES)}")
        states.append(control_pb2.ExecutionState.Value(f"EXECUTION_STATE_{name}"))
    return states


@router.get("/executions", response_model=schema.ListExecutionsResponse, responses=_refusals())
async def list_executions(
    request: Request,
    core: CoreDep,
    state: Annotated[list[str], Query(description=f"repeat for several: {', '.join(_STATE_NAMES)}")] = [],  # noqa: B006 - FastAPI copies defaults
    workflow: Annotated[str, Query(max_length=256, description="workflow name")] = "",
    worker: Annotated[str, Query(max_length=256, description="worker name")] = "",
    created_after_ms: Annotated[
        int, Query(ge=0, le=2**63 - 1, description="submitted at or after (Unix ms)")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="page size (default 50)")] = 50,
    page_token: Annotated[
        str, Query(max_length=512, description="next_page_token of the previous page")
    ] = "",
) -> JSONResponse:
    """Executions from the store, newest first, a page at a time (`next_page_token` is empty on the last)."""
    message = control_pb2.ListExecutionsRequest(
        states=_states(state), workflow=workflow, worker=worker, created_after_ms=created_after_ms,
        page_size=limit, page_token=page_token,
    )  # fmt: skip
    return _answer(await core.control.ListExecutions(message, timeout=_timeout(request)))


@router.get("/workflows", response_model=schema.ListWorkflowsResponse, responses=_refusals())
async def list_workflows(request: Request, core: CoreDep) -> JSONResponse:
    """The latest version of every registered workflow, by name, with how many versions it has."""
    message = control_pb2.ListWorkflowsRequest()
    return _answer(await core.control.ListWorkflows(message, timeout=_timeout(request)))


@router.get("/workflows/{name}", response_model=schema.ListWorkflowsResponse, responses=_refusals(404))
async def show_workflow(
    name: Annotated[str, Path(description="registered workflow name", max_length=256)],
    request: Request,
    core: CoreDep,
    version: Annotated[int, Query(ge=0, le=2**31 - 1, description="only this version; 0 means all")] = 0,
) -> JSONResponse:
    """Every version of one workflow, oldest first (or only `version`): hash, requests, affinity, runtime."""
    message = control_pb2.ListWorkflowsRequest(name=name, version=version)
    return _answer(await core.control.ListWorkflows(message, timeout=_timeout(request)))


@router.post("/workers/{name}/pause", response_model=schema.WorkerInfo, responses=_refusals(404))
async def pause_worker(name: WorkerName, request: Request, core: CoreDep) -> JSONResponse:
    """Stop dispatching to a worker; it keeps its stream and finishes what it runs (API token)."""
    message = control_pb2.PauseWorkerRequest(name=name)
    return _answer(await core.control.PauseWorker(message, timeout=_timeout(request)))


@router.post("/workers/{name}/resume", response_model=schema.WorkerInfo, responses=_refusals(404))
async def resume_worker(name: WorkerName, request: Request, core: CoreDep) -> JSONResponse:
    """Let a paused worker take new executions again (API token)."""
    message = control_pb2.ResumeWorkerRequest(name=name)
    return _answer(await core.control.ResumeWorker(message, timeout=_timeout(request)))


@router.get("/executions/{execution_id}", response_model=schema.Execution, responses=_refusals(404))
async def get_execution(execution_id: ExecutionId, request: Request, core: CoreDep) -> JSONResponse:
    """An execution's current state; `output_json` when COMPLETED, `error` when FAILED."""
    message = control_pb2.GetExecutionRequest(execution_id=execution_id)
    return _answer(await core.control.GetExecution(message, timeout=_timeout(request)))


@router.get("/executions/{execution_id}/explain", response_model=schema.Explanation, responses=_refusals(404))
async def explain_execution(execution_id: ExecutionId, request: Request, core: CoreDep) -> JSONResponse:
    """Why an execution is (or is not) pending: a one-line summary and a verdict per worker."""
    message = control_pb2.ExplainExecutionRequest(execution_id=execution_id)
    return _answer(await core.control.ExplainExecution(message, timeout=_timeout(request)))


@router.post(
    "/executions/{execution_id}/cancel", response_model=schema.Execution, responses=_refusals(404, 409)
)
async def cancel_execution(execution_id: ExecutionId, request: Request, core: CoreDep) -> JSONResponse:
    """Cancel an unfinished execution; 409 when it has already finished."""
    message = control_pb2.CancelExecutionRequest(execution_id=execution_id)
    return _answer(await core.control.CancelExecution(message, timeout=_timeout(request)))


@router.get("/workers", response_model=schema.ListWorkersResponse, responses=_refusals())
async def list_workers(
    request: Request,
    core: CoreDep,
    limit: Annotated[
        int, Query(ge=0, le=10_000, description="page size, by name (default 0: every worker up to 10,000)")
    ] = 0,
    page_token: Annotated[
        str, Query(max_length=512, description="next_page_token of the previous page")
    ] = "",
) -> JSONResponse:
    """Known workers with advertised and reserved resources, connection state and transport
    (a page at a time with `limit`; `next_page_token` is empty on the last)."""
    message = control_pb2.ListWorkersRequest(page_size=limit, page_token=page_token)
    return _answer(await core.control.ListWorkers(message, timeout=_timeout(request)))


@router.post("/workers/{name}/forget", response_model=schema.ForgetWorkerResponse, responses=_refusals(404))
async def forget_worker(
    name: Annotated[str, Path(description="registered worker name", max_length=63)],
    request: Request,
    core: CoreDep,
) -> JSONResponse:
    """Drop a worker now (API token): its work is requeued and its name is free, skipping its grace period."""
    message = control_pb2.ForgetWorkerRequest(name=name)
    return _answer(await core.control.ForgetWorker(message, timeout=_timeout(request)))


# The core's word on who a GetStatus caller is, answered as headers: the body stays ClusterStatus.
CALLER_HEADERS = {CALLER_TENANT: "X-Flux-Tenant", CALLER_ROLE: "X-Flux-Role"}


@router.get(
    "/status",
    response_model=schema.ClusterStatus,
    responses={
        200: {
            "headers": {
                "X-Flux-Tenant": {
                    "description": "the tenant the caller's token speaks for",
                    "schema": {"type": "string"},
                },
                "X-Flux-Role": {
                    "description": "the token's role: read, submit, admin or cluster-admin",
                    "schema": {"type": "string"},
                },
            }
        },
        **_refusals(),
    },
)
async def cluster_status(request: Request, core: CoreDep) -> JSONResponse:
    """Workers, pending executions by requirement shape (with explain's summary), counters, latencies,
    each tenant's usage against its quota; the headers say which tenant and role the token has."""
    call = core.control.GetStatus(control_pb2.GetStatusRequest(), timeout=_timeout(request))
    response = _answer(await call)
    for key, value in await call.trailing_metadata() or ():
        if key in CALLER_HEADERS and isinstance(value, str):
            response.headers[CALLER_HEADERS[key]] = value
    return response
