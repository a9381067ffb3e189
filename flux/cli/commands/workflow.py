"""``flux workflow register|run|status|cancel|list|show``: register files, run workflows, follow one."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flux.cli.render.common import labels_text, requests_text, table, when
from flux.cli.render.executions import execution_dict, execution_text, state_name
from flux.cli.render.workflows import workflow_dict, workflow_text
from flux.cli.support import EXIT_INTERRUPTED, EXIT_TIMED_OUT, UsageError, connect
from flux.errors import FluxError
from flux.v1 import control_pb2

if TYPE_CHECKING:
    from flux.client import FluxClient


def register_file(args: argparse.Namespace) -> int:
    from flux.registration import load_workflow_file

    loaded = load_workflow_file(args.file, allow_import=args.allow_import)
    for note in loaded.notes:  # the file had to be imported: say which value made it so
        print(note, file=sys.stderr)
    with connect(args) as client:
        response = client.register(loaded)
    for wf in response.workflows:
        if wf.unchanged:
            print(f"unchanged {wf.name} v{wf.version} ({wf.source_hash[:12]}): already registered as is")
        else:
            print(f"registered {wf.name} v{wf.version} ({wf.source_hash[:12]})")
    return 0


def _read_input(args: argparse.Namespace) -> tuple[str, str]:
    """The input JSON from INPUT_JSON, ``-`` (stdin) or --input-file (a path, or - for stdin),
    and how to name where it came from in an error."""
    if args.input is not None and args.input_file is not None:
        raise UsageError("give the input once: INPUT_JSON, - (stdin) or --input-file PATH")
    if args.input_file is None and args.input != "-":
        return ("null" if args.input is None else args.input), "INPUT_JSON"
    if "-" in (args.input, args.input_file):
        return sys.stdin.read(), "the input read from stdin"
    try:
        return Path(args.input_file).read_text(encoding="utf-8"), f"--input-file {args.input_file}"
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UsageError(f"--input-file {args.input_file!r} cannot be read: {reason}") from None


def run_workflow(args: argparse.Namespace) -> int:
    if not args.many and (args.max_concurrent is not None or args.print_batch):
        raise UsageError("--max-concurrent and --print-batch are for a batch: use them with --many")
    if args.many:
        from flux.cli.commands.many import run_many

        if args.input_file is None and args.input != "-":
            raise UsageError("--many reads JSON Lines: give --input-file PATH (- for stdin)")
        if args.after:
            raise UsageError(
                "--after runs one execution; for a graph use client.graph() (docs/guides/dependencies.md)"
            )
        text, _ = _read_input(args)
        name = "<stdin>" if "-" in (args.input, args.input_file) else args.input_file
        with connect(args) as client:
            return run_many(client, args, text, name)
    text, where = _read_input(args)
    try:
        json.loads(text)
    except ValueError as exc:
        print(f"error: {where} is not valid JSON ({exc}); quote strings, e.g. '\"World\"'", file=sys.stderr)
        return 1
    from flux.cli.progress import Follower
    from flux.client import WaitTimedOut

    with connect(args) as client:
        policy = _run_policy(client, args)
        if not args.wait:
            execution = client.run_json(
                args.name, text, version=args.version, priority=args.priority, **policy
            )
            print(execution.execution_id)
            return 0
        follower = Follower(client, sys.stderr if sys.stderr.isatty() else None)
        try:
            final = follower.run(args.name, text, args.version, args.priority, args.timeout, policy)
        except WaitTimedOut as exc:
            print(f"{exc} — flux execution explain {exc.execution.execution_id}", file=sys.stderr)
            return EXIT_TIMED_OUT
        except KeyboardInterrupt:
            latest = follower.latest
            if latest is None:
                print("\nstopped before the server answered; the run may have been accepted", file=sys.stderr)
                return EXIT_INTERRUPTED
            with contextlib.suppress(FluxError):  # its state now, if the server answers at once
                latest = client.get(latest.execution_id, timeout=2.0)
            print(
                f"\nstopped waiting; execution {latest.execution_id} is left {state_name(latest.state)}"
                f" — cancel it with: flux workflow cancel {latest.execution_id}",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
    if final.state == control_pb2.EXECUTION_STATE_COMPLETED:
        print(final.output_json or "null")
        return 0
    if final.HasField("error"):
        print(f"error: {final.error.type}: {final.error.message}", file=sys.stderr)
        if final.error.traceback:
            print(final.error.traceback, file=sys.stderr)
    else:
        print(f"error: execution {final.execution_id} is {state_name(final.state)}", file=sys.stderr)
    return 1


def execution_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        execution = client.get(args.execution_id)
    if args.json:
        print(json.dumps(execution_dict(execution)))
    else:
        print(execution_text(execution))
    return (
        1
        if execution.state in (control_pb2.EXECUTION_STATE_FAILED, control_pb2.EXECUTION_STATE_CANCELLED)
        else 0
    )


def _run_policy(client: FluxClient, args: argparse.Namespace) -> dict[str, Any]:
    """``--attempt-timeout`` and ``--retries``, as ``run``'s overrides. ``--retries N`` keeps the
    workflow's backoff and error lists (read from its latest registration) with N + 1 attempts."""
    policy: dict[str, Any] = {}
    if getattr(args, "key", None) is not None:
        policy["key"] = args.key
    if getattr(args, "gang_size", None) is not None:
        policy["gang_size"] = args.gang_size
    if getattr(args, "after", None):
        policy["after"] = args.after
        policy["when"] = args.when
    elif getattr(args, "when", None) is not None:
        raise UsageError("--when needs --after: the executions this run waits for")
    if args.attempt_timeout is not None:
        policy["attempt_timeout"] = args.attempt_timeout
    if args.retries is not None:
        from flux.domain.policy import Retry, retry_from_proto

        declared = client.workflows(args.name, args.version).workflows
        base = (
            retry_from_proto(declared[-1].policy.retry)
            if declared and declared[-1].HasField("policy")
            else Retry()
        )
        policy["retry"] = dataclasses.replace(base, max_attempts=args.retries + 1)
    return policy


def cancel_execution(args: argparse.Namespace) -> int:
    with connect(args) as client:
        execution = client.cancel(args.execution_id)
    print(f"{execution.execution_id} {state_name(execution.state)}")
    return 0


def list_workflows(args: argparse.Namespace) -> int:
    with connect(args) as client:
        workflows = client.workflows().workflows
    if args.json:
        print(json.dumps({"workflows": [workflow_dict(w) for w in workflows]}))
        return 0
    if not workflows:
        print("no workflows registered; register a file with 'flux workflow register FILE'")
        return 0
    rows = [
        (w.name, f"v{w.version}", str(w.version_count), w.runtime, requests_text(w.requests),
         labels_text(w.affinity), when(w.registered_at_ms))
        for w in workflows
    ]  # fmt: skip
    print(table(("NAME", "LATEST", "VERSIONS", "RUNTIME", "REQUESTS", "AFFINITY", "REGISTERED"), rows))
    return 0


def show_workflow(args: argparse.Namespace) -> int:
    with connect(args) as client:
        versions = list(client.workflows(args.name, args.version or 0).workflows)
    if args.json:
        print(json.dumps({"name": args.name, "versions": [workflow_dict(w) for w in versions]}))
        return 0
    print(workflow_text(versions[-1]))
    if len(versions) > 1:
        rows = [
            (f"v{w.version}", w.source_hash[:12], w.runtime, requests_text(w.requests),
             labels_text(w.affinity), when(w.registered_at_ms))
            for w in versions
        ]  # fmt: skip
        print()
        print(table(("VERSION", "HASH", "RUNTIME", "REQUESTS", "AFFINITY", "REGISTERED"), rows))
    return 0
