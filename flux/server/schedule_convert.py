"""Schedules on the wire: ``flux.v1.Schedule`` to and from ``flux.domain.schedule.Schedule``."""

from __future__ import annotations

from typing import Any

from flux.domain.schedule import DEFAULT_CATCH_UP, Schedule, catch_up_text, jitter_of, next_tick
from flux.errors import InvalidArgument
from flux.v1 import schedules_pb2


def schedule_from_proto(message: schedules_pb2.Schedule, field: str = "schedule") -> Schedule:
    """Checked as the domain checks it; the error names ``field`` (InvalidArgument)."""
    try:
        return Schedule(
            name=message.name,
            workflow=message.workflow,
            cron=message.cron or None,
            every=message.every or None,
            timezone=message.timezone or "UTC",
            input_json=message.input_json or "null",
            overlap=message.overlap or "skip",
            catch_up=message.catch_up or DEFAULT_CATCH_UP,
            jitter=message.jitter or 0.0,
        )
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def schedule_to_proto(
    schedule: Schedule, tenant: str = "", paused: bool = False, cursor: float = 0.0
) -> schedules_pb2.Schedule:
    upcoming = 0.0
    if not paused and cursor:
        tick = next_tick(schedule, cursor)
        upcoming = tick + jitter_of(schedule, tenant, tick)
    # The cursor is a tick once one was handled; before that (a new or resumed schedule) it is the
    # moment ticks started to count, which is no tick to show.
    last = cursor if cursor and next_tick(schedule, cursor - 0.5) == cursor else 0.0
    return schedules_pb2.Schedule(
        name=schedule.name,
        workflow=schedule.workflow,
        cron=schedule.cron or "",
        every=_duration(schedule.every) if schedule.every is not None else "",
        timezone=schedule.timezone,
        input_json=schedule.input_json,
        overlap=schedule.overlap,
        catch_up=catch_up_text(schedule.catch_up),
        jitter=f"{schedule.jitter:g}s" if schedule.jitter else "",
        tenant=tenant,
        paused=paused,
        next_tick=upcoming,
        last_tick=last,
    )


def _duration(seconds: float) -> str:
    """Whole seconds as people write them: 30s, 5m, 2h, 1d (the largest unit that divides them)."""
    whole = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def schedule_to_dict(message: schedules_pb2.Schedule) -> dict[str, Any]:
    """What ``--json`` and the gateway show."""
    return {
        "name": message.name,
        "tenant": message.tenant,
        "workflow": message.workflow,
        "cron": message.cron or None,
        "every": message.every or None,
        "timezone": message.timezone,
        "input": message.input_json,
        "overlap": message.overlap,
        "catch_up": message.catch_up,
        "jitter": message.jitter or None,
        "paused": message.paused,
        "next_tick": message.next_tick or None,
        "last_tick": message.last_tick or None,
    }


def run_to_dict(message: schedules_pb2.ScheduleRun) -> dict[str, Any]:
    return {
        "tick": message.tick,
        "execution_id": message.execution_id,
        "result": message.result,
        "state": message.state,
        "manual": message.manual,
    }
