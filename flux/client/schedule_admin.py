"""Schedules from Python: ``client.schedules`` (``flux.client`` and ``flux.aio``).

Any token reads its tenant's schedules, a submit token triggers one, an admin token changes
them (a cluster admin's may name any tenant with ``tenant=``). Terms are checked here first, so a
bad one (a cron expression, a time zone, a duration) is refused naming its field before anything
is sent::

    client.schedules.create("nightly", workflow="report", cron="0 2 * * *", timezone="Europe/Paris")
    client.schedules.create("poll", workflow="poll", every="30s", input={"url": "..."}, overlap="skip")
    client.schedules.show("nightly").runs        # [ScheduleRunInfo(tick, execution_id, result, state, manual)]
    client.schedules.trigger("nightly")          # a manual tick now: its run
    client.schedules.pause("nightly"); client.schedules.resume("nightly")
    client.schedules.apply([{"name": "poll", "workflow": "poll", "every": "1m"}])
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flux.domain.schedule import Schedule
from flux.errors import InvalidArgument
from flux.v1 import schedules_pb2

__all__ = ["AsyncScheduleAdmin", "ScheduleAdmin", "ScheduleInfo", "ScheduleRunInfo"]


@dataclass(frozen=True, slots=True)
class ScheduleRunInfo:
    """One tick and its run: ``state`` is the execution's state now, or SKIPPED / QUEUED."""

    tick: float
    execution_id: str
    result: str
    state: str
    manual: bool


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule and where it stands: ``next_tick`` (None while paused) and ``last_tick``, seconds
    since the epoch; ``runs``, newest first, from ``show`` only."""

    schedule: Schedule
    tenant: str
    paused: bool
    next_tick: float | None
    last_tick: float | None
    runs: tuple[ScheduleRunInfo, ...] = ()

    @property
    def name(self) -> str:
        return self.schedule.name


def _schedule(name: str, terms: Mapping[str, Any], field: str = "schedule") -> Schedule:
    document = dict(terms)
    if "input" in document and not isinstance(document["input"], str):
        document["input"] = json.dumps(document["input"])
    try:
        return Schedule.from_dict(document, name)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{field}: {exc}" if field != "schedule" else str(exc)) from None


def _schedules(schedules: Iterable[Schedule | Mapping[str, Any]]) -> list[Schedule]:
    checked = []
    for index, schedule in enumerate(schedules):
        if isinstance(schedule, Schedule):
            checked.append(schedule)
        elif not isinstance(schedule, Mapping):
            raise InvalidArgument(
                f"schedules[{index}]: a schedule is a mapping with a name; got {type(schedule).__name__}"
            )
        else:
            checked.append(_schedule(schedule.get("name"), schedule, f"schedules[{index}]"))  # type: ignore[arg-type]
    return checked


def _to_proto(schedule: Schedule) -> schedules_pb2.Schedule:
    from flux.server.schedule_convert import schedule_to_proto

    return schedule_to_proto(schedule)


def _info(message: schedules_pb2.Schedule, runs: Iterable[schedules_pb2.ScheduleRun] = ()) -> ScheduleInfo:
    from flux.server.schedule_convert import schedule_from_proto

    return ScheduleInfo(
        schedule_from_proto(message),
        message.tenant,
        message.paused,
        message.next_tick or None,
        message.last_tick or None,
        tuple(_run(r) for r in runs),
    )


def _run(message: schedules_pb2.ScheduleRun) -> ScheduleRunInfo:
    return ScheduleRunInfo(message.tick, message.execution_id, message.result, message.state, message.manual)


def _create(name: str, tenant: str, terms: dict[str, Any]) -> schedules_pb2.CreateScheduleRequest:
    return schedules_pb2.CreateScheduleRequest(schedule=_to_proto(_schedule(name, terms)), tenant=tenant)


class ScheduleAdmin:
    """The ``ScheduleService`` over a client's channel and credentials."""

    def __init__(self, call: Callable[[str, Any], Any]):
        self._call = call

    def create(self, name: str, tenant: str = "", **terms: Any) -> ScheduleInfo:
        """``workflow=``, ``cron=`` or ``every=``, ``timezone=``, ``input=`` (any JSON value),
        ``overlap=``, ``catch_up=`` (a count, "all" or "none"), ``jitter=``."""
        return _info(self._call("CreateSchedule", _create(name, tenant, terms)).schedule)

    def list(self, tenant: str = "") -> list[ScheduleInfo]:
        answer = self._call("ListSchedules", schedules_pb2.ListSchedulesRequest(tenant=tenant))
        return [_info(m) for m in answer.schedules]

    def show(self, name: str, tenant: str = "", runs: int = 10) -> ScheduleInfo:
        """The schedule and its ``runs`` newest runs."""
        answer = self._call(
            "GetSchedule", schedules_pb2.GetScheduleRequest(name=name, tenant=tenant, runs=runs)
        )
        return _info(answer.schedule, answer.runs)

    def pause(self, name: str, tenant: str = "") -> ScheduleInfo:
        request = schedules_pb2.PauseScheduleRequest(name=name, tenant=tenant)
        return _info(self._call("PauseSchedule", request).schedule)

    def resume(self, name: str, tenant: str = "") -> ScheduleInfo:
        request = schedules_pb2.ResumeScheduleRequest(name=name, tenant=tenant)
        return _info(self._call("ResumeSchedule", request).schedule)

    def trigger(self, name: str, tenant: str = "") -> ScheduleRunInfo:
        request = schedules_pb2.TriggerScheduleRequest(name=name, tenant=tenant)
        return _run(self._call("TriggerSchedule", request).run)

    def delete(self, name: str, tenant: str = "") -> None:
        self._call("DeleteSchedule", schedules_pb2.DeleteScheduleRequest(name=name, tenant=tenant))

    def apply(
        self, schedules: Iterable[Schedule | Mapping[str, Any]], tenant: str = ""
    ) -> list[ScheduleInfo]:
        """Create or replace each schedule by name, all of them or none."""
        request = schedules_pb2.ApplySchedulesRequest(
            schedules=[_to_proto(s) for s in _schedules(schedules)], tenant=tenant
        )
        return [_info(m) for m in self._call("ApplySchedules", request).schedules]


class AsyncScheduleAdmin:
    """``ScheduleAdmin`` for ``flux.aio``: the same calls, awaited."""

    def __init__(self, call: Callable[[str, Any], Awaitable[Any]]):
        self._call = call

    async def create(self, name: str, tenant: str = "", **terms: Any) -> ScheduleInfo:
        return _info((await self._call("CreateSchedule", _create(name, tenant, terms))).schedule)

    async def list(self, tenant: str = "") -> list[ScheduleInfo]:
        answer = await self._call("ListSchedules", schedules_pb2.ListSchedulesRequest(tenant=tenant))
        return [_info(m) for m in answer.schedules]

    async def show(self, name: str, tenant: str = "", runs: int = 10) -> ScheduleInfo:
        request = schedules_pb2.GetScheduleRequest(name=name, tenant=tenant, runs=runs)
        answer = await self._call("GetSchedule", request)
        return _info(answer.schedule, answer.runs)

    async def pause(self, name: str, tenant: str = "") -> ScheduleInfo:
        request = schedules_pb2.PauseScheduleRequest(name=name, tenant=tenant)
        return _info((await self._call("PauseSchedule", request)).schedule)

    async def resume(self, name: str, tenant: str = "") -> ScheduleInfo:
        request = schedules_pb2.ResumeScheduleRequest(name=name, tenant=tenant)
        return _info((await self._call("ResumeSchedule", request)).schedule)

    async def trigger(self, name: str, tenant: str = "") -> ScheduleRunInfo:
        request = schedules_pb2.TriggerScheduleRequest(name=name, tenant=tenant)
        return _run((await self._call("TriggerSchedule", request)).run)

    async def delete(self, name: str, tenant: str = "") -> None:
        await self._call("DeleteSchedule", schedules_pb2.DeleteScheduleRequest(name=name, tenant=tenant))

    async def apply(
        self, schedules: Iterable[Schedule | Mapping[str, Any]], tenant: str = ""
    ) -> list[ScheduleInfo]:
        request = schedules_pb2.ApplySchedulesRequest(
            schedules=[_to_proto(s) for s in _schedules(schedules)], tenant=tenant
        )
        return [_info(m) for m in (await self._call("ApplySchedules", request)).schedules]
