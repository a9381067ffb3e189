"""``flux schedule create|list|show|pause|resume|trigger|delete NAME …``, ``flux schedule apply FILE``.

A schedules file is YAML or JSON, as a limits file::

    schedules:
      - name: nightly-report
        workflow: report
        cron: "0 2 * * *"
        timezone: Europe/Paris
        input: {"format": "pdf"}
      - name: poll
        workflow: poll
        every: 30s
        overlap: skip          # skip | allow | cancel-previous | queue
        catch_up: none         # a number, all, none

It is validated here first (every error names its field), then again by the server.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from flux.cli.commands.tenants import read_document
from flux.cli.support import ServiceCalls
from flux.domain.schedule import Schedule
from flux.errors import InvalidArgument


def _service(args: argparse.Namespace) -> ServiceCalls:
    from flux.v1 import schedules_pb2_grpc

    return ServiceCalls(args, schedules_pb2_grpc.ScheduleServiceStub)


def _checked(data: Any, where: str, name: str | None = None) -> Schedule:
    if not isinstance(data, dict):
        raise InvalidArgument(f"{where}: a schedule is a mapping with a name; got {type(data).__name__}")
    try:
        return Schedule.from_dict(data, name if name is not None else data.get("name"))  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


def _to_proto(schedule: Schedule) -> Any:
    from flux.server.schedule_convert import schedule_to_proto

    return schedule_to_proto(schedule)


def when(seconds: float) -> str:
    """A tick as people read it: UTC, to the second."""
    if not seconds:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _terms(message: Any) -> str:
    clock = f"cron {message.cron!r}" if message.cron else f"every {message.every}"
    if message.cron and message.timezone != "UTC":
        clock += f" ({message.timezone})"
    parts = [f"runs {message.workflow} {clock}", f"overlap {message.overlap}", f"catch-up {message.catch_up}"]
    if message.jitter:
        parts.append(f"jitter {message.jitter}")
    return ", ".join(parts)


def create_schedule(args: argparse.Namespace) -> int:
    from flux.v1 import schedules_pb2

    try:
        json.loads(args.input)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"--input must be JSON, e.g. '{{\"n\": 1}}': {exc}") from None
    terms = {
        "workflow": args.workflow, "cron": args.cron, "every": args.every, "timezone": args.timezone,
        "input": args.input, "overlap": args.overlap, "catch_up": args.catch_up, "jitter": args.jitter,
    }  # fmt: skip
    schedule = _checked(terms, "flux schedule create", args.name)
    with _service(args) as service:
        answer = service.call(
            "CreateSchedule",
            schedules_pb2.CreateScheduleRequest(schedule=_to_proto(schedule), tenant=args.tenant),
        )
    created = answer.schedule
    print(f"schedule {created.name} created in tenant {created.tenant}: {_terms(created)}")
    print(f"  next tick {when(created.next_tick)}")
    return 0


def _named_call(args: argparse.Namespace, method: str, request_type: str) -> Any:
    from flux.v1 import schedules_pb2

    request = getattr(schedules_pb2, request_type)(name=args.name, tenant=args.tenant)
    with _service(args) as service:
        return service.call(method, request)


def pause_schedule(args: argparse.Namespace) -> int:
    _named_call(args, "PauseSchedule", "PauseScheduleRequest")
    print(f"schedule {args.name} paused")
    return 0


def resume_schedule(args: argparse.Namespace) -> int:
    answer = _named_call(args, "ResumeSchedule", "ResumeScheduleRequest")
    print(f"schedule {args.name} resumed; next tick {when(answer.schedule.next_tick)}")
    return 0


def trigger_schedule(args: argparse.Namespace) -> int:
    answer = _named_call(args, "TriggerSchedule", "TriggerScheduleRequest")
    print(answer.run.execution_id)
    return 0


def delete_schedule(args: argparse.Namespace) -> int:
    _named_call(args, "DeleteSchedule", "DeleteScheduleRequest")
    print(f"schedule {args.name} deleted")
    return 0


def apply_schedules(args: argparse.Namespace) -> int:
    from flux.v1 import schedules_pb2

    document = read_document(args.file)
    entries = document.get("schedules") if isinstance(document, dict) else document
    if not isinstance(entries, list):
        raise InvalidArgument(
            f"{args.file}: expected a list of schedules, or a mapping with key 'schedules' holding one"
        )
    checked = [_checked(entry, f"{args.file}: schedules[{i}]") for i, entry in enumerate(entries)]
    request = schedules_pb2.ApplySchedulesRequest(
        schedules=[_to_proto(s) for s in checked], tenant=args.tenant
    )
    with _service(args) as service:
        answer = service.call("ApplySchedules", request)
    for schedule in answer.schedules:
        print(f"schedule {schedule.name} applied: {_terms(schedule)}")
    return 0


def list_schedules(args: argparse.Namespace) -> int:
    from flux.cli.render.common import table
    from flux.server.schedule_convert import schedule_to_dict
    from flux.v1 import schedules_pb2

    with _service(args) as service:
        answer = service.call("ListSchedules", schedules_pb2.ListSchedulesRequest(tenant=args.tenant))
    if args.json:
        print(json.dumps({"schedules": [schedule_to_dict(m) for m in answer.schedules]}))
        return 0
    rows = [
        (
            m.name,
            m.workflow,
            m.cron or f"every {m.every}",
            m.overlap,
            "paused" if m.paused else when(m.next_tick),
            when(m.last_tick),
        )  # fmt: skip
        for m in answer.schedules
    ]
    print(table(("NAME", "WORKFLOW", "WHEN", "OVERLAP", "NEXT TICK", "LAST TICK"), rows))
    return 0


def show_schedule(args: argparse.Namespace) -> int:
    from flux.cli.render.common import table
    from flux.server.schedule_convert import run_to_dict, schedule_to_dict
    from flux.v1 import schedules_pb2

    request = schedules_pb2.GetScheduleRequest(name=args.name, tenant=args.tenant, runs=max(1, args.runs))
    with _service(args) as service:
        answer = service.call("GetSchedule", request)
    if args.json:
        print(
            json.dumps({**schedule_to_dict(answer.schedule), "runs": [run_to_dict(r) for r in answer.runs]})
        )
        return 0
    s = answer.schedule
    print(f"schedule {s.name} (tenant {s.tenant}): {_terms(s)}")
    print(f"  next tick {'paused' if s.paused else when(s.next_tick)}, last tick {when(s.last_tick)}")
    if not answer.runs:
        print("  no runs yet")
        return 0
    rows = [(when(r.tick) + (" (manual)" if r.manual else ""), r.execution_id, r.state) for r in answer.runs]
    print(table(("TICK", "EXECUTION", "STATE"), rows))
    return 0
