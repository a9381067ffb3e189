"""The ``flux limit`` group: a tenant's named limits, shared across the workflows that name them."""

from __future__ import annotations

import argparse

from flux.cli.commands.lazy import command


def _terms(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--concurrency", type=int, default=None, metavar="N",
        help="at most N executions naming it SCHEDULED or RUNNING at once",
    )  # fmt: skip
    p.add_argument("--rate", default=None, metavar="R", help="a rate: 'N/s', 'N/m' or 'N/h', e.g. 100/m")
    p.add_argument("--burst", type=int, default=None, metavar="B", help="tokens saved up at most (default 1)")
    p.add_argument(
        "--per-key", action=argparse.BooleanOptionalAction, default=None,
        help="one budget per key (the workflow's key, or a run's --key) instead of one for the tenant",
    )  # fmt: skip


def add_limits(commands: argparse._SubParsersAction, with_server) -> None:  # type: ignore[type-arg,no-untyped-def]
    limit = commands.add_parser(
        "limit", help="named limits shared across workflows: limits=['openai']"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")

    def scoped(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--tenant", default="", metavar="T", help="the tenant (default: the token's)")
        return with_server(p)

    create = scoped(limit.add_parser(
        "create", help="create a named limit",
        description="Create a named limit of the tenant. Workflows naming it (limits=['openai']) "
        "share it: without --per-key one budget for the whole tenant, with it one per key. A tenant "
        "admin creates its own tenant's limits; a cluster admin any tenant's (--tenant).",
    ))  # fmt: skip
    create.add_argument("name", metavar="NAME", help="the limit's name")
    _terms(create)
    create.set_defaults(run=command("limits", "create_limit"))
    change = scoped(limit.add_parser("set", help="change a limit; it applies to waiting work at once"))
    change.add_argument("name", metavar="NAME", help="the limit's name")
    _terms(change)
    change.add_argument(
        "--unset", action="append", default=[], choices=("concurrency", "rate", "burst"), metavar="FIELD",
        help="clear a field (repeatable): concurrency, rate, burst",
    )  # fmt: skip
    change.set_defaults(run=command("limits", "set_limit"))
    delete = scoped(
        limit.add_parser("delete", help="delete a limit (its workflows are no longer held by it)")
    )
    delete.add_argument("name", metavar="NAME", help="the limit's name")
    delete.set_defaults(run=command("limits", "delete_limit"))
    listing = scoped(limit.add_parser("list", help="the tenant's limits"))
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=command("limits", "list_limits"))
    show = scoped(limit.add_parser("show", help="one limit, with its busiest keys in use and waiting"))
    show.add_argument("name", metavar="NAME", help="the limit's name")
    show.add_argument("--top", type=int, default=10, metavar="N", help="show the N busiest keys (default 10)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(run=command("limits", "show_limit"))
    apply = scoped(limit.add_parser("apply", help="create or replace limits from a YAML or JSON file"))
    apply.add_argument("file", metavar="FILE", help="limits file ('-' reads stdin)")
    apply.set_defaults(run=command("limits", "apply_limits"))
