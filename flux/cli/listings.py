"""Listing and operator commands: ``flux execution list|show``, ``flux workflow list|show``,
``flux worker pause|resume``.

Listings read the server's store, so they cover every execution and workflow
it (or, with replicas, any replica) has recorded, not only what is in memory.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flux.cli import arguments, render, tables
from flux.client import FluxClient
from flux.v1 import control_pb2

# What one ListExecutions call may return (the server's bound); --limit pages past it.
SERVER_PAGE_MAX = 1000
DEFAULT_LIMIT = 50

_STATE_BY_NAME = {name: value for value, name in render.STATES.items()}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _state(text: str) -> int:
    name = text.strip().upper().removeprefix("EXECUTION_STATE_")
    if name not in _STATE_BY_NAME:
        raise argparse.ArgumentTypeError(
            f"--state must be one of {', '.join(_STATE_BY_NAME)} (any case); got {text!r}"
        )
    return _STATE_BY_NAME[name]


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``2h``, ``1d``, ``1h30m``, or plain seconds -> seconds."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise argparse.ArgumentTypeError(
                f"--since must be a duration such as 90s, 15m, 2h, 1d or 1h30m; got {text!r}"
            ) from None
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"--since must be a positive duration; got {text!r}")
    return seconds


def add_commands(
    commands: Any,
    workflow: Any,
    execution: Any,
    with_server: Callable[[argparse.ArgumentParser], argparse.ArgumentParser],
) -> Any:
    """Add the listing subcommands to the ``workflow`` and ``execution`` groups, and the ``worker``
    group with pause and resume; returns that group for the other worker actions."""
    listing = with_server(execution.add_parser("list", help="executions, newest first, with filters"))
    listing.add_argument(
        "--state", action="append", type=_state, default=[], metavar="STATE",
        help=f"only this state; repeat for several ({', '.join(_STATE_BY_NAME)})",
    )  # fmt: skip
    listing.add_argument("--workflow", default="", metavar="NAME", help="only executions of this workflow")
    listing.add_argument("--worker", default="", metavar="NAME", help="only executions on this worker")
    listing.add_argument(
        "--since", type=parse_duration, default=None, metavar="DURATION",
        help="only executions submitted within this long, e.g. 15m, 2h, 1d",
    )  # fmt: skip
    listing.add_argument(
        "--limit",
        type=arguments.count("--limit"),
        default=DEFAULT_LIMIT,
        help=f"at most this many (default {DEFAULT_LIMIT})",
    )
    listing.add_argument(
        "--page-token", default="", help="continue after an earlier --json listing's next_page_token"
    )
    listing.add_argument(
        "--json", action="store_true", help="one JSON object with executions and next_page_token"
    )
    listing.set_defaults(run=_list_executions)

    show = with_server(execution.add_parser("show", help="one execution's full record"))
    show.add_argument("execution_id", metavar="EXECUTION_ID", help="the id `flux workflow run` printed")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(run=_show_execution)

    workflows = with_server(workflow.add_parser("list", help="registered workflows (latest version of each)"))
    workflows.add_argument("--json", action="store_true", help="print one JSON object")
    workflows.set_defaults(run=_list_workflows)

    described = with_server(workflow.add_parser("show", help="a workflow's versions and options"))
    described.add_argument("name", metavar="NAME", help="registered workflow name")
    described.add_argument(
        "--version",
        type=arguments.count("--version"),
        default=None,
        help="only this version (default: every version)",
    )
    described.add_argument("--json", action="store_true", help="print one JSON object")
    described.set_defaults(run=_show_workflow)

    worker = commands.add_parser("worker", help="operate on one worker").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    pause = with_server(
        worker.add_parser("pause", help="take no new executions; keep the stream and running work")
    )
    pause.add_argument("name", metavar="NAME", help="worker name, as in `flux workers list`")
    pause.add_argument("--json", action="store_true", help="print the worker as one JSON object")
    pause.set_defaults(run=_pause, paused=True)
    resume = with_server(worker.add_parser("resume", help="take new executions again after a pause"))
    resume.add_argument("name", metavar="NAME", help="worker name, as in `flux workers list`")
    resume.add_argument("--json", action="store_true", help="print the worker as one JSON object")
    resume.set_defaults(run=_pause, paused=False)
    return worker


def _client(args: argparse.Namespace) -> FluxClient:
    from flux.cli import _client as client

    return client(args)


# ---------------------------------------------------------------------- executions


def _list_executions(args: argparse.Namespace) -> int:
    since = int((time.time() - args.since) * 1000) if args.since else 0
    found: list[control_pb2.Execution] = []
    token = args.page_token
    with _client(args) as client:
        while True:
            page = client.list_executions(
                args.state, args.workflow, args.worker, since,
                min(SERVER_PAGE_MAX, args.limit - len(found)), token,
            )  # fmt: skip
            found.extend(page.executions)
            token = page.next_page_token
            if not token or len(found) >= args.limit:
                break
    if args.json:
        print(json.dumps({"executions": [render.execution_dict(e) for e in found], "next_page_token": token}))
    else:
        print(executions_text(found, int(time.time() * 1000), tables.terminal_width()))
        if token:
            print(f"(more: --limit {args.limit * 2}, or --json for next_page_token)", file=sys.stderr)
    return 0


def executions_text(executions: list[control_pb2.Execution], now_ms: int, width: int | None = None) -> str:
    if not executions:
        return "no executions"
    rows = [
        (e.execution_id, f"{e.workflow.name} v{e.workflow.version}", render.state_name(e.state),
         e.worker or "-", str(e.attempt), str(e.priority),
         f"{render.duration((now_ms - e.created_at_ms) / 1000)} ago")
        for e in executions
    ]  # fmt: skip
    return render.table(
        ("EXECUTION", "WORKFLOW", "STATE", "WORKER", "ATTEMPT", "PRIORITY", "SUBMITTED"), rows,
        right=frozenset({4, 5}), width=width,
        drop=(5, 4, 6), shrink=(1, 3, 0),  # PRIORITY, ATTEMPT, SUBMITTED; WORKFLOW, WORKER, EXECUTION
    )  # fmt: skip


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ms else "-"


def _show_execution(args: argparse.Namespace) -> int:
    with _client(args) as client:
        execution = client.get(args.execution_id)
    if args.json:
        print(json.dumps(render.execution_dict(execution)))
    else:
        print(render.execution_text(execution))
        print(f"generation {execution.generation}")
        print(f"input      {execution.input_json or 'null'}")
        print(f"submitted  {_when(execution.created_at_ms)}")
        print(f"updated    {_when(execution.updated_at_ms)}")
        if execution.HasField("error") and execution.error.traceback:
            print(execution.error.traceback.rstrip())
    failed = (control_pb2.EXECUTION_STATE_FAILED, control_pb2.EXECUTION_STATE_CANCELLED)
    return 1 if execution.state in failed else 0


# ---------------------------------------------------------------------- workflows


def workflow_dict(w: control_pb2.WorkflowInfo) -> dict[str, Any]:
    r = w.requests
    return {
        "name": w.name,
        "version": w.version,
        "version_count": w.version_count,
        "source_hash": w.source_hash,
        "entrypoint": w.entrypoint,
        "filename": w.filename,
        "runtime": w.runtime,
        "requests": {
            "cpu": r.cpu,
            "memory": r.memory,
            "gpu": r.gpu,
            "gpu_memory": r.gpu_memory,
            "disk": r.disk,
            "packages": list(r.packages),
        },
        "affinity": dict(w.affinity),
        "max_attempts": w.max_attempts,
        "priority": w.priority,
        "tenant": w.tenant,
        "registered_at_ms": w.registered_at_ms,
    }


def _labels(labels: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def _list_workflows(args: argparse.Namespace) -> int:
    with _client(args) as client:
        workflows = client.workflows().workflows
    if args.json:
        print(json.dumps({"workflows": [workflow_dict(w) for w in workflows]}))
        return 0
    if not workflows:
        print("no workflows registered; register a file with 'flux workflow register FILE'")
        return 0
    rows = [
        (w.name, f"v{w.version}", str(w.version_count), w.runtime, render.requests_text(w.requests),
         _labels(w.affinity), _when(w.registered_at_ms))
        for w in workflows
    ]  # fmt: skip
    print(render.table(("NAME", "LATEST", "VERSIONS", "RUNTIME", "REQUESTS", "AFFINITY", "REGISTERED"), rows))
    return 0


def workflow_text(w: control_pb2.WorkflowInfo) -> str:
    return "\n".join(
        (
            f"workflow     {w.name} v{w.version} (of {w.version_count})",
            f"runtime      {w.runtime}",
            f"entrypoint   {w.entrypoint} in {w.filename or '-'}",
            f"source hash  {w.source_hash}",
            f"requests     {render.requests_text(w.requests)}",
            f"affinity     {_labels(w.affinity)}",
            f"max attempts {w.max_attempts}",
            f"priority     {w.priority}",
            f"tenant       {w.tenant or 'default'}",
            f"registered   {_when(w.registered_at_ms)}",
        )
    )


def _show_workflow(args: argparse.Namespace) -> int:
    with _client(args) as client:
        versions = list(client.workflows(args.name, args.version or 0).workflows)
    if args.json:
        print(json.dumps({"name": args.name, "versions": [workflow_dict(w) for w in versions]}))
        return 0
    print(workflow_text(versions[-1]))
    if len(versions) > 1:
        rows = [
            (f"v{w.version}", w.source_hash[:12], w.runtime, render.requests_text(w.requests),
             _labels(w.affinity), _when(w.registered_at_ms))
            for w in versions
        ]  # fmt: skip
        print()
        print(render.table(("VERSION", "HASH", "RUNTIME", "REQUESTS", "AFFINITY", "REGISTERED"), rows))
    return 0


# ---------------------------------------------------------------------- workers


def _pause(args: argparse.Namespace) -> int:
    with _client(args) as client:
        worker = client.pause_worker(args.name) if args.paused else client.resume_worker(args.name)
    if args.json:
        print(json.dumps(render.worker_dict(worker)))
    elif args.paused:
        print(
            f"worker {worker.name} paused: it keeps its {worker.active_executions} running "
            "execution(s) and takes no new ones until 'flux worker resume'"
        )
    else:
        print(f"worker {worker.name} resumed: it takes new executions again")
    return 0
