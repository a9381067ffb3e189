"""Schedule routes: the ``ScheduleService`` as REST (any API token reads its tenant's schedules, a
submit token triggers one, an admin token changes them; the core decides which). ``?tenant=``
names another tenant (cluster admins only: to anyone else it is a tenant that does not exist, 404)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from flux.v1 import schedules_pb2, schedules_pb2_grpc
from gateway.clients.service import ServiceCalls, named_refusals
from gateway.security import API_BEARER
from gateway.wire import OffLoopJSONRoute, schema, to_message

router = APIRouter(tags=["schedules"], dependencies=[Depends(API_BEARER)], route_class=OffLoopJSONRoute)

ScheduleName = Annotated[str, Path(description="the schedule's name, as in GET /schedules", max_length=64)]
TenantQuery = Annotated[str, Query(description="the tenant (default: the token's)", max_length=63)]

Schedule = schema.model_of(schedules_pb2.Schedule.DESCRIPTOR)
ApplyBody = schema.model_of(schedules_pb2.ApplySchedulesRequest.DESCRIPTOR)
ListSchedulesResponse = schema.model_of(schedules_pb2.ListSchedulesResponse.DESCRIPTOR)
ScheduleAnswer = schema.model_of(schedules_pb2.CreateScheduleResponse.DESCRIPTOR)
GetScheduleResponse = schema.model_of(schedules_pb2.GetScheduleResponse.DESCRIPTOR)
TriggerScheduleResponse = schema.model_of(schedules_pb2.TriggerScheduleResponse.DESCRIPTOR)
ApplySchedulesResponse = schema.model_of(schedules_pb2.ApplySchedulesResponse.DESCRIPTOR)

_refusals = named_refusals("schedule")


async def schedules(request: Request) -> ServiceCalls:
    return ServiceCalls(request, schedules_pb2_grpc.ScheduleServiceStub)


SchedulesDep = Annotated[ServiceCalls, Depends(schedules)]


@router.get("/schedules", response_model=ListSchedulesResponse, responses=_refusals(404))
async def list_schedules(service: SchedulesDep, tenant: TenantQuery = "") -> JSONResponse:
    """The tenant's schedules, by name, with their next and last ticks."""
    return await service.call("ListSchedules", schedules_pb2.ListSchedulesRequest(tenant=tenant))


@router.post("/schedules", response_model=ScheduleAnswer, responses=_refusals(404, 409))
async def create_schedule(
    body: Schedule, request: Request, service: SchedulesDep, tenant: TenantQuery = ""
) -> JSONResponse:  # type: ignore[valid-type]
    """Create a schedule (``cron`` or ``every``); 409 when the tenant has one of that name."""
    message = await to_message(body.to_json_dict(), schedules_pb2.Schedule(), request)  # type: ignore[attr-defined]
    return await service.call(
        "CreateSchedule", schedules_pb2.CreateScheduleRequest(schedule=message, tenant=tenant)
    )


@router.put("/schedules", response_model=ApplySchedulesResponse, responses=_refusals(404))
async def apply_schedules(
    body: ApplyBody, request: Request, service: SchedulesDep, tenant: TenantQuery = ""
) -> JSONResponse:  # type: ignore[valid-type]
    """Create or replace schedules by name (``{"schedules": [...]}``), all of them or none."""
    message = await to_message(body.to_json_dict(), schedules_pb2.ApplySchedulesRequest(), request)  # type: ignore[attr-defined]
    message.tenant = message.tenant or tenant
    return await service.call("ApplySchedules", message)


@router.get("/schedules/{name}", response_model=GetScheduleResponse, responses=_refusals(404))
async def get_schedule(
    name: ScheduleName,
    service: SchedulesDep,
    tenant: TenantQuery = "",
    runs: Annotated[int, Query(ge=0, le=100, description="recent runs shown at most (0: 10)")] = 0,
) -> JSONResponse:
    """One schedule, with its recent runs (tick, execution id, state), newest first."""
    return await service.call(
        "GetSchedule", schedules_pb2.GetScheduleRequest(name=name, tenant=tenant, runs=runs)
    )


@router.post("/schedules/{name}/pause", response_model=ScheduleAnswer, responses=_refusals(404))
async def pause_schedule(name: ScheduleName, service: SchedulesDep, tenant: TenantQuery = "") -> JSONResponse:
    """Stop firing ticks until resumed."""
    return await service.call("PauseSchedule", schedules_pb2.PauseScheduleRequest(name=name, tenant=tenant))


@router.post("/schedules/{name}/resume", response_model=ScheduleAnswer, responses=_refusals(404))
async def resume_schedule(
    name: ScheduleName, service: SchedulesDep, tenant: TenantQuery = ""
) -> JSONResponse:
    """Fire ticks again from now on (the ticks it slept through do not run)."""
    return await service.call("ResumeSchedule", schedules_pb2.ResumeScheduleRequest(name=name, tenant=tenant))


@router.post("/schedules/{name}/trigger", response_model=TriggerScheduleResponse, responses=_refusals(404))
async def trigger_schedule(
    name: ScheduleName, service: SchedulesDep, tenant: TenantQuery = ""
) -> JSONResponse:
    """Fire a manual tick now, whatever the overlap policy; its run."""
    return await service.call(
        "TriggerSchedule", schedules_pb2.TriggerScheduleRequest(name=name, tenant=tenant)
    )


@router.delete("/schedules/{name}", responses=_refusals(404))
async def delete_schedule(
    name: ScheduleName, service: SchedulesDep, tenant: TenantQuery = ""
) -> JSONResponse:
    """Delete a schedule (its runs stay)."""
    return await service.call("DeleteSchedule", schedules_pb2.DeleteScheduleRequest(name=name, tenant=tenant))
