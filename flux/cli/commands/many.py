"""``flux workflow run NAME --input-file inputs.jsonl --many``: one execution per line, in bulk.

The lines are checked here first, so a bad one is named by its line number before
anything is sent; the inputs then go in RunWorkflows calls of the per-call cap
(``FluxClient.run_many_json``), as one batch (its id on stderr; alone on stdout with
``--print-batch``; ``--max-concurrent N`` throttles it). Output keeps input order: one id per line, or with
``--wait`` one line per input (the output JSON; an empty line where the execution did
not complete, its error on stderr).
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from flux.cli.render.executions import state_name
from flux.client import FluxClient, WaitTimedOut
from flux.errors import FluxError, InvalidArgument
from flux.v1 import control_pb2

EXIT_FAILED = 1
EXIT_TIMED_OUT = 3


def parse_lines(text: str, name: str) -> tuple[list[str], list[int]]:
    """The JSON inputs of a JSON Lines text (blank lines skipped) and the line number of each."""
    inputs: list[str] = []
    numbers: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except ValueError as exc:
            raise InvalidArgument(f"{name}:{number}: not JSON: {exc}") from None
        except RecursionError:
            raise InvalidArgument(f"{name}:{number}: not JSON: nests too deeply") from None
        inputs.append(line)
        numbers.append(number)
    if not inputs:
        raise InvalidArgument(f"{name} has no input: give one JSON value per line")
    return inputs, numbers


def run_many(client: FluxClient, args: argparse.Namespace, text: str, name: str) -> int:
    inputs, numbers = parse_lines(text, name)
    try:
        executions = client.run_many_json(
            args.name, inputs, version=args.version, priority=args.priority, key=getattr(args, "key", None),
            gang_size=getattr(args, "gang_size", None), batch=True, max_concurrent=args.max_concurrent,
        )  # fmt: skip
    except FluxError as exc:
        # The server names an input by its index (input_json[3]); the user knows it by its line.
        where = re.sub(r"input_json\[(\d+)\]", lambda m: f"{name}:{numbers[int(m.group(1))]}", str(exc))
        raise type(exc)(where) from None
    most = f", at most {args.max_concurrent} at once" if args.max_concurrent else ""
    print(f"batch {executions.batch_id}: {len(executions)} runs{most}", file=sys.stderr)
    if args.print_batch and not args.wait:
        print(executions.batch_id)
        return 0
    if not args.wait:
        sys.stdout.write("".join(f"{e.execution_id}\n" for e in executions))
        return 0
    try:
        finals = client.wait_all(executions, args.timeout)
    except WaitTimedOut as exc:
        print(f"{exc} (line {_line_of(exc.execution, executions, numbers)} of {name})", file=sys.stderr)
        return EXIT_TIMED_OUT
    status = 0
    lines = []
    for final, number in zip(finals, numbers, strict=True):
        if final.state == control_pb2.EXECUTION_STATE_COMPLETED:
            lines.append(final.output_json or "null")
            continue
        status = EXIT_FAILED
        lines.append("")
        if final.HasField("error"):
            why = f"{final.error.type}: {final.error.message}"
        else:
            why = state_name(final.state)
        print(f"error: {name}:{number}: execution {final.execution_id}: {why}", file=sys.stderr)
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return status


def _line_of(
    execution: control_pb2.Execution, executions: list[control_pb2.Execution], numbers: list[int]
) -> int:
    for submitted, number in zip(executions, numbers, strict=True):
        if submitted.execution_id == execution.execution_id:
            return number
    return 0
