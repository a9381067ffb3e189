"""The ``flux`` command's argparse tree: every command, flag and help text.

The ``flux start`` group (the flags that configure a server, a gateway or a worker) is
built in ``flux.cli.parser_start``; the administrative groups (tokens, pools, tenants, the
audit trail) in ``flux.cli.parser_admin``. Each leaf parser's ``run`` default is its handler,
from ``flux.cli.commands`` (one module per command group); ``flux.cli.main`` parses and
calls it. How a typed flag's value is read is in ``flux.cli.arguments``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from flux.cli.arguments import (
    EXECUTION_STATES,
    attempt_duration,
    count,
    execution_id_list,
    execution_state,
    max_concurrent,
    parse_duration,
    priority,
    seconds,
    whole_number,
)
from flux.cli.commands.lazy import command
from flux.cli.parser_admin import add_admin, with_server
from flux.cli.parser_start import add_start
from flux.cli.support import DEFAULT_LIMIT, EXIT_STATUS, EXIT_TIMED_OUT

LOG_LEVEL_HELP = "DEBUG, INFO, WARNING or ERROR (default $FLUX_LOG_LEVEL or INFO)"


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked (the lookup reads every
    distribution's metadata: 25 ms that every other command, and each worker's start, would pay)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("flux-dispatch")
        except PackageNotFoundError:  # running from a tree that was never installed
            found = "unknown"
        print(f"flux {found}")  # on stdout, as argparse's own version action prints it
        parser.exit()


def leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser that runs a command (``flux start server``, ``flux workers list``, …)."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield parser
    for action in subcommands:
        for sub in dict.fromkeys(action.choices.values()):  # an alias maps to the same parser
            yield from leaf_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flux", description="Resource-aware dispatch of Python workflows.")
    parser.add_argument("--log-level", default=os.environ.get("FLUX_LOG_LEVEL", "INFO"), help=LOG_LEVEL_HELP)
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_start(commands)

    workflow = commands.add_parser("workflow", help="register, run and follow workflows").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    register = with_server(workflow.add_parser("register", help="register every workflow in a file"))
    register.add_argument("file", metavar="FILE", help="a Python file with @workflow functions")
    register.add_argument(
        "--allow-import", action="store_true",
        help="import the file (running its code) when a decorator value is not a literal",
    )  # fmt: skip
    register.set_defaults(run=command("workflow", "register_file"))
    run = with_server(workflow.add_parser("run", help="run a workflow", epilog=EXIT_STATUS))
    run.add_argument("name", metavar="NAME", help="registered workflow name")
    run.add_argument(
        "input", nargs="?", default=None, metavar="INPUT_JSON",
        help="the input as JSON, e.g. '\"World\"' (default null); - reads it from stdin",
    )  # fmt: skip
    run.add_argument("--input-file", metavar="PATH", help="read the input JSON from this file (- for stdin)")
    run.add_argument(
        "--wait", action="store_true",
        help="wait and print the output as JSON; on a terminal, a live line on stderr shows progress",
    )  # fmt: skip
    run.add_argument(
        "--timeout", type=seconds("--timeout"), default=None,
        help=f"with --wait: give up after this many seconds, exit {EXIT_TIMED_OUT} (default: wait forever)",
    )  # fmt: skip
    run.add_argument(
        "--version",
        type=whole_number("--version"),
        default=0,
        help="workflow version (default: the latest)",
    )
    run.add_argument(
        "--priority", type=priority, default=None, metavar="N",
        help="this run's priority, -1000 to 1000, higher first (default: the workflow's, else 0)",
    )  # fmt: skip
    run.add_argument(
        "--attempt-timeout", type=attempt_duration, default=None, metavar="DURATION",
        help="this run's limit on one attempt, e.g. 90s, 10m, 1h (default: the workflow's); "
        "not how long --wait waits (that is --timeout)",
    )  # fmt: skip
    run.add_argument(
        "--retries", type=whole_number("--retries"), default=None, metavar="N",
        help="retry a failed attempt up to N times (N + 1 attempts), with the workflow's backoff "
        "(default: the workflow's retry policy)",
    )  # fmt: skip
    run.add_argument(
        "--key", default=None, metavar="KEY",
        help="this run's flow-control key (concurrency and rate limits per key), in place of the one "
        "the workflow computes from the input",
    )  # fmt: skip
    run.add_argument(
        "--gang-size", type=count("--gang-size"), default=None, metavar="N",
        help="run as a gang of N members, each on its own worker, all at once or none, with the "
        "workflow's same/spread topology (default: the workflow's gang, or one worker)",
    )  # fmt: skip
    run.add_argument(
        "--after", type=execution_id_list, default=None, metavar="ID[,ID...]",
        help="wait for these executions first: stored at once, it runs once each has ended as --when "
        "asks (its body reads their outputs as ctx.upstream)",
    )  # fmt: skip
    run.add_argument(
        "--when", choices=("succeeded", "failed", "finished"), default=None,
        help="with --after: how each must end (default succeeded); when one ends otherwise this run "
        "ends CANCELLED, reason dependency",
    )  # fmt: skip
    run.add_argument(
        "--many", action="store_true",
        help="one execution per line of --input-file (JSON Lines; blank lines skipped), submitted in bulk "
        "as one batch; prints one id per line, or with --wait one output per line, in input order (the "
        "batch's id on stderr)",
    )  # fmt: skip
    run.add_argument(
        "--max-concurrent", type=max_concurrent, default=None, metavar="N",
        help="with --many: at most N of the batch's runs SCHEDULED or RUNNING at once (default: no limit)",
    )  # fmt: skip
    run.add_argument(
        "--print-batch", action="store_true",
        help="with --many: print the batch's id alone on stdout instead of the executions' ids",
    )  # fmt: skip
    run.set_defaults(run=command("workflow", "run_workflow"))
    status = with_server(workflow.add_parser("status", help="an execution's state"))
    status.add_argument("execution_id", metavar="EXECUTION_ID", help="the id `flux workflow run` printed")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(run=command("workflow", "execution_status"))
    cancel = with_server(workflow.add_parser("cancel", help="cancel an execution"))
    cancel.add_argument("execution_id", metavar="EXECUTION_ID", help="the execution to cancel")
    cancel.set_defaults(run=command("workflow", "cancel_execution"))

    execution = commands.add_parser("execution", help="inspect executions").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    explain = with_server(execution.add_parser("explain", help="why an execution is pending"))
    explain.add_argument("execution_id", metavar="EXECUTION_ID", help="the execution to explain")
    explain.add_argument("--json", action="store_true", help="print one JSON object")
    explain.set_defaults(run=command("execution", "explain_execution"))

    executions = with_server(execution.add_parser("list", help="executions, newest first, with filters"))
    executions.add_argument(
        "--state", action="append", type=execution_state, default=[], metavar="STATE",
        help=f"only this state; repeat for several ({', '.join(EXECUTION_STATES)})",
    )  # fmt: skip
    executions.add_argument("--workflow", default="", metavar="NAME", help="only executions of this workflow")
    executions.add_argument("--worker", default="", metavar="NAME", help="only executions on this worker")
    executions.add_argument(
        "--since", type=parse_duration, default=None, metavar="DURATION",
        help="only executions submitted within this long, e.g. 15m, 2h, 1d",
    )  # fmt: skip
    executions.add_argument(
        "--limit",
        type=count("--limit"),
        default=DEFAULT_LIMIT,
        help=f"at most this many (default {DEFAULT_LIMIT})",
    )
    executions.add_argument(
        "--page-token", default="", help="continue after an earlier --json listing's next_page_token"
    )
    executions.add_argument(
        "--json", action="store_true", help="one JSON object with executions and next_page_token"
    )
    executions.set_defaults(run=command("execution", "list_executions"))

    retry = with_server(execution.add_parser("retry", help="start a new attempt of a FAILED execution"))
    retry.add_argument("execution_id", metavar="EXECUTION_ID", help="the FAILED execution to try again")
    retry.set_defaults(run=command("execution", "retry_execution"))

    show = with_server(execution.add_parser("show", help="one execution's full record"))
    show.add_argument("execution_id", metavar="EXECUTION_ID", help="the id `flux workflow run` printed")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(run=command("execution", "show_execution"))

    workflows = with_server(workflow.add_parser("list", help="registered workflows (latest version of each)"))
    workflows.add_argument("--json", action="store_true", help="print one JSON object")
    workflows.set_defaults(run=command("workflow", "list_workflows"))

    described = with_server(workflow.add_parser("show", help="a workflow's versions and options"))
    described.add_argument("name", metavar="NAME", help="registered workflow name")
    described.add_argument(
        "--version",
        type=count("--version"),
        default=None,
        help="only this version (default: every version)",
    )
    described.add_argument("--json", action="store_true", help="print one JSON object")
    described.set_defaults(run=command("workflow", "show_workflow"))

    worker_actions = commands.add_parser("worker", help="operate on one worker").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    pause = with_server(
        worker_actions.add_parser("pause", help="take no new executions; keep the stream and running work")
    )
    pause.add_argument("name", metavar="NAME", help="worker name, as in `flux workers list`")
    pause.add_argument("--json", action="store_true", help="print the worker as one JSON object")
    pause.set_defaults(run=command("workers", "pause_or_resume"), paused=True)
    resume = with_server(worker_actions.add_parser("resume", help="take new executions again after a pause"))
    resume.add_argument("name", metavar="NAME", help="worker name, as in `flux workers list`")
    resume.add_argument("--json", action="store_true", help="print the worker as one JSON object")
    resume.set_defaults(run=command("workers", "pause_or_resume"), paused=False)

    workers = commands.add_parser("workers", help="the fleet").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = with_server(workers.add_parser("list", help="workers and their resources"))
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=command("workers", "list_workers"))

    forget = with_server(
        worker_actions.add_parser(
            "forget", help="drop a worker now: requeue its work and free its name (skips its grace period)"
        )
    )
    forget.add_argument("name", metavar="NAME", help="the worker's registered name")
    forget.set_defaults(run=command("workers", "forget_worker"))

    add_admin(commands)

    status = with_server(commands.add_parser("status", help="the fleet and the pending queue at a glance"))
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(run=command("status", "cluster_status"))

    # Also after the subcommand (`flux start worker w1 --log-level DEBUG`); SUPPRESS leaves the
    # value given before it (or the default) in place when the subcommand does not repeat it.
    for leaf in leaf_parsers(parser):
        leaf.add_argument("--log-level", default=argparse.SUPPRESS, help=LOG_LEVEL_HELP)
    return parser
