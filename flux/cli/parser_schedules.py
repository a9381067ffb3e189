"""The ``flux schedule`` group: a tenant's workflows run on a clock, each tick once."""

from __future__ import annotations

import argparse

from flux.cli.commands.lazy import command


def add_schedules(commands: argparse._SubParsersAction, with_server) -> None:  # type: ignore[type-arg,no-untyped-def]
    schedule = commands.add_parser(
        "schedule", help="run a workflow on a clock: a cron expression or every N seconds"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")

    def scoped(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--tenant", default="", metavar="T", help="the tenant (default: the token's)")
        return with_server(p)

    def named(action: str, help_text: str, function: str) -> argparse.ArgumentParser:
        p = scoped(schedule.add_parser(action, help=help_text))
        p.add_argument("name", metavar="NAME", help="the schedule's name")
        p.set_defaults(run=command("schedules", function))
        return p

    create = named("create", "create a schedule", "create_schedule")
    create.description = (
        "Create a schedule: each tick runs WORKFLOW once, under an execution id derived from the "
        "schedule and the tick (a restarted server or another replica cannot fire it again). Its "
        "first tick is the first after now. A tenant admin creates its own tenant's schedules."
    )
    create.add_argument("--workflow", required=True, metavar="WF", help="the workflow each tick runs")
    clock = create.add_mutually_exclusive_group(required=True)
    clock.add_argument("--cron", metavar="EXPR", help="five cron fields, e.g. '*/5 * * * *'")
    clock.add_argument(
        "--every", metavar="DURATION", help="a period: 30s, 5m, 1h (whole seconds, at least 1s)"
    )
    create.add_argument("--timezone", default="UTC", metavar="TZ", help="the cron's time zone (default UTC)")
    create.add_argument("--input", default="null", metavar="JSON", help="each run's input (JSON)")
    create.add_argument(
        "--overlap", default="skip", choices=("skip", "allow", "cancel-previous", "queue"),
        help="when the previous run is unfinished: skip the tick (default), allow it, cancel the "
        "previous run, or queue the tick until the previous run finishes",
    )  # fmt: skip
    create.add_argument(
        "--catch-up", default="1", metavar="N|all|none",
        help="ticks missed while no server ran that still run: the last N (default 1), all, none",
    )  # fmt: skip
    create.add_argument(
        "--jitter", default=None, metavar="D", help="delay each firing by a per-tick random amount below D"
    )
    listing = scoped(schedule.add_parser("list", help="the tenant's schedules, next and last ticks"))
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=command("schedules", "list_schedules"))
    show = named("show", "one schedule with its recent runs", "show_schedule")
    show.add_argument("--runs", type=int, default=10, metavar="N", help="the N newest runs (default 10)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    named("pause", "stop firing ticks until resumed", "pause_schedule")
    named("resume", "fire ticks again from now on", "resume_schedule")
    named("trigger", "fire a manual tick now (whatever the overlap policy)", "trigger_schedule")
    named("delete", "delete a schedule (its runs stay)", "delete_schedule")
    apply = scoped(schedule.add_parser("apply", help="create or replace schedules from a YAML or JSON file"))
    apply.add_argument("file", metavar="FILE", help="schedules file ('-' reads stdin)")
    apply.set_defaults(run=command("schedules", "apply_schedules"))
