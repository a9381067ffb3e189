"""``flux execution list|show|explain``: executions from the server's store, and why one waits.

Listings read the store, so they cover every execution the server (or, with replicas,
any replica) has recorded, not only what is in memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from flux.cli.render.common import when
from flux.cli.render.executions import (
    execution_dict,
    execution_text,
    executions_text,
    explanation_dict,
    explanation_text,
    state_name,
)
from flux.cli.support import connect
from flux.cli.tables import terminal_width
from flux.v1 import control_pb2

# What one ListExecutions call may return (the server's bound); --limit pages past it.
SERVER_PAGE_MAX = 1000


def list_executions(args: argparse.Namespace) -> int:
    since = int((time.time() - args.since) * 1000) if args.since else 0
    found: list[control_pb2.Execution] = []
    token = args.page_token
    with connect(args) as client:
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
        print(json.dumps({"executions": [execution_dict(e) for e in found], "next_page_token": token}))
    else:
        print(executions_text(found, int(time.time() * 1000), terminal_width()))
        if token:
            print(f"(more: --limit {args.limit * 2}, or --json for next_page_token)", file=sys.stderr)
    return 0


def retry_execution(args: argparse.Namespace) -> int:
    with connect(args) as client:
        execution = client.retry(args.execution_id)
    print(f"{execution.execution_id} {state_name(execution.state)} attempt {execution.attempt}")
    return 0


def show_execution(args: argparse.Namespace) -> int:
    with connect(args) as client:
        execution = client.get(args.execution_id)
    if args.json:
        print(json.dumps(execution_dict(execution)))
    else:
        print(execution_text(execution))
        print(f"generation {execution.generation}")
        print(f"input      {execution.input_json or 'null'}")
        print(f"submitted  {when(execution.created_at_ms)}")
        print(f"updated    {when(execution.updated_at_ms)}")
        if execution.HasField("error") and execution.error.traceback:
            print(execution.error.traceback.rstrip())
    failed = (control_pb2.EXECUTION_STATE_FAILED, control_pb2.EXECUTION_STATE_CANCELLED)
    return 1 if execution.state in failed else 0


def explain_execution(args: argparse.Namespace) -> int:
    with connect(args) as client:
        explanation = client.explain(args.execution_id)
    print(json.dumps(explanation_dict(explanation)) if args.json else explanation_text(explanation))
    return 0
