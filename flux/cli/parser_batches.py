"""The ``flux batch`` group: a batch's progress, a wait for its end, its cancel."""

from __future__ import annotations

import argparse

from flux.cli.arguments import seconds
from flux.cli.commands.lazy import command

EXIT_TIMED_OUT = 3


def add_batches(commands: argparse._SubParsersAction, with_server) -> None:  # type: ignore[type-arg,no-untyped-def]
    batch = commands.add_parser(
        "batch", help="batches: the runs of one --many (or client.map) as one object"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")

    def one(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        p = with_server(batch.add_parser(name, help=help_text, description=description))
        p.add_argument(
            "batch_id", metavar="ID", help="the batch's id, as `flux workflow run --many` printed it"
        )
        p.add_argument("--json", action="store_true", help="print one JSON object")
        return p

    show = one(
        "show",
        "a batch's progress",
        "How many of the batch's runs wait, run, completed, failed and were cancelled.",
    )
    show.set_defaults(run=command("batches", "show_batch"))
    wait = one(
        "wait", "wait until every run of a batch is finished",
        "Wait until every run of the batch is finished, then print its progress. Exit 0 when every "
        f"run completed, 1 when some failed or were cancelled, {EXIT_TIMED_OUT} at --timeout.",
    )  # fmt: skip
    wait.add_argument(
        "--timeout", type=seconds("--timeout"), default=None,
        help=f"give up after this many seconds, exit {EXIT_TIMED_OUT} (default: wait forever)",
    )  # fmt: skip
    wait.set_defaults(run=command("batches", "wait_batch"))
    cancel = one(
        "cancel", "cancel every unfinished run of a batch",
        "Cancel every run of the batch not yet finished (the finished ones stay as they are); the "
        "batch takes no new runs after.",
    )  # fmt: skip
    cancel.set_defaults(run=command("batches", "cancel_batch"))
