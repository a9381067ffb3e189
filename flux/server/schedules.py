"""``ScheduleService``: a tenant's schedules (``flux schedule …``).

Any role reads its own tenant's schedules; a submit token may trigger one (a manual tick is a
run); a tenant admin changes its own tenant's, a cluster admin any tenant's (flux.server.callers
decides by role, this module by tenant). A request naming another tenant than the caller's own
is answered as one naming a tenant that does not exist. Every change is recorded in the audit trail.
"""

from __future__ import annotations

import grpc

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.state.tenants import OPERATOR, Caller
from flux.dispatcher.transitions.ticker import state_label
from flux.errors import NotFound
from flux.server.answers import unary
from flux.server.callers import Callers
from flux.server.schedule_convert import schedule_from_proto, schedule_to_proto
from flux.store import TickRun
from flux.v1 import schedules_pb2, schedules_pb2_grpc

DEFAULT_RUNS = 10
MOST_RUNS = 100


class ScheduleService(schedules_pb2_grpc.ScheduleServiceServicer):
    def __init__(self, dispatcher: Dispatcher, callers: Callers | None = None):
        self.dispatcher = dispatcher
        self.book = dispatcher.schedules
        self.callers = callers

    async def _scope(self, context: grpc.aio.ServicerContext, tenant: str) -> tuple[Caller, str]:
        """The caller, and the tenant the request is about (the caller's when it names none)."""
        caller = OPERATOR if self.callers is None else await self.callers.of(context)
        tenant = tenant or caller.tenant
        if not caller.sees_tenant(tenant):
            raise NotFound(f"tenant {tenant!r} does not exist")
        await self.dispatcher.tenants.get(tenant)
        return caller, tenant

    def _answer(self, tenant: str, name: str) -> schedules_pb2.Schedule:
        held = self.book.get(tenant, name)
        return schedule_to_proto(held.schedule, tenant, held.paused, held.cursor)

    async def _run(self, run: TickRun) -> schedules_pb2.ScheduleRun:
        found = None
        if run.result == "fired":
            found = self.dispatcher.current(run.execution_id) or await self.dispatcher.store.get_execution(
                run.execution_id
            )
        return schedules_pb2.ScheduleRun(
            tick=run.tick, execution_id=run.execution_id, result=run.result,
            state=state_label(run, found), manual=run.tick != int(run.tick),
        )  # fmt: skip

    @unary("a schedule request", invalid=(TypeError, ValueError))
    async def CreateSchedule(
        self, request: schedules_pb2.CreateScheduleRequest, context: grpc.aio.ServicerContext
    ):
        caller, tenant = await self._scope(context, request.tenant)
        created = await self.book.create(tenant, schedule_from_proto(request.schedule))
        await self.dispatcher.audit.record(
            caller, "schedule.create", created.schedule.name, tenant, terms=created.schedule.to_dict()
        )
        return schedules_pb2.CreateScheduleResponse(schedule=self._answer(tenant, created.schedule.name))

    @unary("a schedule request", invalid=(TypeError, ValueError))
    async def ListSchedules(
        self, request: schedules_pb2.ListSchedulesRequest, context: grpc.aio.ServicerContext
    ):
        _, tenant = await self._scope(context, request.tenant)
        return schedules_pb2.ListSchedulesResponse(
            schedules=[schedule_to_proto(s, tenant, h.paused, h.cursor) for s, h in self.book.list(tenant)]
        )

    @unary("a schedule request", invalid=(TypeError, ValueError))
    async def GetSchedule(self, request: schedules_pb2.GetScheduleRequest, context: grpc.aio.ServicerContext):
        _, tenant = await self._scope(context, request.tenant)
        answer = self._answer(tenant, request.name)
        count = min(request.runs if request.runs > 0 else DEFAULT_RUNS, MOST_RUNS)
        runs = await self.book.runs(tenant, request.name, count)
        return schedules_pb2.GetScheduleResponse(schedule=answer, runs=[await self._run(r) for r in runs])

    @unary("a schedule request", invalid=(TypeError, ValueError))
    async def PauseSchedule(
        self, request: schedules_pb2.PauseScheduleRequest, context: grpc.aio.ServicerContext
    ):
        caller, tenant = await self._scope(context, request.tenant)
        await self.book.set_paused(tenant, request.name, True)
        await self.dispatcher.audit.record(caller, "schedule.pause", request.name, tenant)
        return schedules_pb2.PauseScheduleResponse(schedule=self._answer(tenant, request.name))

    @unary("a schedule request", invalid=(TypeError, ValueError))
    async def ResumeSchedule(
        self, request: schedules_pb2.ResumeScheduleRequest, context: grpc.aio.ServicerContext
    ):
        caller, tenant = await self._scope(context, request.tenant)
        await self.book.set_paused(tenant, request.name, False)
        await self.dispatcher.audit.record(caller, "schedule.resume", request.name, tenant)
        return schedules_pb2.ResumeScheduleResponse(schedule=self._answer(tenant, request.name))

    @unary("a schedule request", invalid=(TypeError, ValueError))
    async def TriggerSchedule(
        self, request: schedules_pb2.TriggerScheduleRequest, context: grpc.aio.ServicerContext
    ):
        caller, tenant = await self._scope(context, request.tenant)
        run = await self.dispatcher.ticker.trigger(tenant, request.name)
        await self.dispatcher.audit.record(
            caller, "schedule.trigger", request.name, tenant, execution_id=run.execution_id
        )
        return schedules_pb2.TriggerScheduleResponse(run=await self._run(run))

    @unary("a schedule request", invalid=(TypeError, ValueError))
    async def DeleteSchedule(
        self, request: schedules_pb2.DeleteScheduleRequest, context: grpc.aio.ServicerContext
    ):
        caller, tenant = await self._scope(context, request.tenant)
        await self.book.delete(tenant, request.name)
        await self.dispatcher.audit.record(caller, "schedule.delete", request.name, tenant)
        return schedules_pb2.DeleteScheduleResponse()

    @unary("a schedule request", invalid=(TypeError, ValueError))
    async def ApplySchedules(
        self, request: schedules_pb2.ApplySchedulesRequest, context: grpc.aio.ServicerContext
    ):
        caller, tenant = await self._scope(context, request.tenant)
        schedules = [schedule_from_proto(m, f"schedules[{i}]") for i, m in enumerate(request.schedules)]
        applied = await self.book.apply(tenant, schedules)
        for held in applied:
            await self.dispatcher.audit.record(
                caller, "schedule.apply", held.schedule.name, tenant, terms=held.schedule.to_dict()
            )
        return schedules_pb2.ApplySchedulesResponse(
            schedules=[self._answer(tenant, h.schedule.name) for h in applied]
        )
