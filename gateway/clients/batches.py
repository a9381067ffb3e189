"""Batch routes: the ``BatchService`` as REST. Any API token reads its tenant's batches, a submit
token (or better) cancels them; another tenant's batch is 404, as one that does not exist.

``GET /batches/{id}/wait?timeout=S`` follows the batch's ``WatchBatch`` stream and answers with
its progress once every member is finished, or as it is at the timeout (``finished`` false): a
long poll, so a plain HTTP client needs no stream.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from flux.v1 import batches_pb2, batches_pb2_grpc
from gateway.clients.service import ServiceCalls
from gateway.security import API_BEARER
from gateway.wire import OffLoopJSONRoute, protojson, schema

router = APIRouter(tags=["batches"], dependencies=[Depends(API_BEARER)], route_class=OffLoopJSONRoute)

BatchId = Annotated[
    str, Path(description="the batch's id, as run-many answered it (batch_id)", min_length=1, max_length=64)
]
BatchAnswer = schema.model_of(batches_pb2.GetBatchResponse.DESCRIPTOR)
# A wait answers within this at most; a client waiting longer asks again.
MAX_WAIT_S = 300.0

_WHY = {
    401: "no API token, or not a valid one",
    403: "a token whose role may not do this (or the worker token)",
    404: "no such batch (or another tenant's)",
    422: "invalid path or query",
    503: "the core is unreachable",
}


def _refusals() -> dict[int | str, dict[str, object]]:
    return schema.refusals(_WHY)


async def batches(request: Request) -> ServiceCalls:
    return ServiceCalls(request, batches_pb2_grpc.BatchServiceStub)


BatchesDep = Annotated[ServiceCalls, Depends(batches)]


@router.get("/batches/{batch_id}", response_model=BatchAnswer, responses=_refusals())
async def get_batch(batch_id: BatchId, service: BatchesDep) -> JSONResponse:
    """A batch and its members' progress now: how many wait, run, completed, failed, were cancelled."""
    return await service.call("GetBatch", batches_pb2.GetBatchRequest(batch_id=batch_id))


@router.get("/batches/{batch_id}/wait", response_model=BatchAnswer, responses=_refusals())
async def wait_batch(
    batch_id: BatchId,
    request: Request,
    timeout: Annotated[
        float, Query(gt=0, le=MAX_WAIT_S, description="seconds to wait at most (default 30)")
    ] = 30.0,
) -> JSONResponse:
    """The batch once every member is finished, or as it is at ``timeout`` (``finished`` false)."""
    stub = batches_pb2_grpc.BatchServiceStub(request.app.state.core.channel)
    authorization = request.headers.get("authorization")
    metadata = (("authorization", authorization),) if authorization else ()
    stream = stub.WatchBatch(batches_pb2.WatchBatchRequest(batch_id=batch_id), metadata=metadata)
    last = None

    async def follow() -> None:
        nonlocal last
        async for step in stream:
            last = step

    try:
        await asyncio.wait_for(follow(), timeout)
    except TimeoutError:
        pass
    finally:
        stream.cancel()
    if last is None:  # nothing in time: answer as a read would
        return await ServiceCalls(request, batches_pb2_grpc.BatchServiceStub).call(
            "GetBatch", batches_pb2.GetBatchRequest(batch_id=batch_id)
        )
    return JSONResponse(protojson.to_dict(batches_pb2.GetBatchResponse(batch=last.batch)))


@router.post("/batches/{batch_id}/cancel", response_model=BatchAnswer, responses=_refusals())
async def cancel_batch(batch_id: BatchId, service: BatchesDep) -> JSONResponse:
    """Cancel every unfinished member (the finished stay as they are); the batch takes no new runs."""
    return await service.call("CancelBatch", batches_pb2.CancelBatchRequest(batch_id=batch_id))
