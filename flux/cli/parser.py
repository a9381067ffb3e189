"""The ``flux`` command's argparse tree: every command, flag and help text.

The ``flux start`` group (the flags that configure a server, a gateway or a worker) is
built in ``flux.cli.parser_start``. Each leaf parser's ``run`` default is its handler,
from ``flux.cli.commands`` (one module per command group); ``flux.cli.main`` parses and
calls it. How a typed flag's value is read is in ``flux.cli.arguments``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from flux.cli.arguments import (
    EXECUTION_STATES,
    count,
    duration,
    execution_state,
    parse_duration,
    priority,
    seconds,
    whole_number,
)
from flux.cli.commands.lazy import command
from flux.cli.parser_start import add_start
from flux.cli.support import DEFAULT_LIMIT, EXIT_STATUS, EXIT_TIMED_OUT
from flux.defaults import default_server
from flux.domain.tenant import FIELDS
from flux.security import Role

TENANT_ROLES = ("read", "submit", "admin", "cluster-admin")

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


def with_server(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument(
        "--server", default=default_server(), metavar="HOST:PORT",
        help="control plane address (default $FLUX_SERVER or 127.0.0.1:50051)",
    )  # fmt: skip
    p.add_argument(
        "--api-token",
        help="client token (default $FLUX_API_TOKEN, the file $FLUX_API_TOKEN_FILE names, or ./.flux/api.token)",
    )
    p.add_argument("--api-token-file", help="read the client token from this file")
    p.add_argument(
        "--ca", help="CA bundle (PEM) to verify a TLS server (default $FLUX_CA; plaintext if unset)"
    )
    return p


def _tenant_terms(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cpu", metavar="N", help="nominal quota of cores")
    p.add_argument("--memory", metavar="Q", help="nominal quota of memory, e.g. 64Gi")
    p.add_argument("--gpu", metavar="N", help="nominal quota of GPUs")
    p.add_argument("--gpu-memory", metavar="Q", help="nominal quota of VRAM (gpu x gpu_memory), e.g. 320Gi")
    p.add_argument(
        "--executions", metavar="N",
        help="nominal quota of executions scheduled or running at once (each counts one, requests or not)",
    )  # fmt: skip
    p.add_argument("--cohort", metavar="NAME", help="the cohort it borrows from and lends to")
    p.add_argument(
        "--borrowing-limit",
        metavar="R=Q,…",
        help="how far above its quota it may borrow, e.g. gpu=2,memory=8Gi",
    )
    p.add_argument("--lending-limit", metavar="R=Q,…", help="how much of its quota it lends, e.g. gpu=1")
    p.add_argument("--weight", metavar="W", help="fair-share weight (> 0, default 1)")
    p.add_argument(
        "--max-pending", metavar="N",
        help="its unfinished executions accepted at most (default: its fair share of the server's --max-pending)",
    )  # fmt: skip
    p.add_argument(
        "--max-pending-bytes", metavar="Q",
        help="input bytes of its unfinished executions accepted at most, e.g. 1Gi "
        "(default: its fair share of the server's --max-pending-bytes)",
    )  # fmt: skip


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
        "--many", action="store_true",
        help="one execution per line of --input-file (JSON Lines; blank lines skipped), submitted in bulk; "
        "prints one id per line, or with --wait one output per line, in input order",
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

    token = commands.add_parser(
        "token", help="the tokens the server generated in ./.flux/, and tenants' tokens"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    create = with_server(
        token.add_parser(
            "create",
            help="create an API token for a tenant, or a worker token for a pool (printed once)",
            description="Create an API token that speaks for one tenant: read sees its executions, "
            "submit also runs and cancels them, admin also registers the tenant's workflows and mints "
            "and revokes its tokens (its own tenant only, never a quota), cluster-admin administers "
            "the whole cluster (tenants, quotas, pools, workers; only a cluster-admin token may mint "
            "one). A tenant admin mints tokens of its own tenant, with roles up to its own. "
            "With --worker --pool P (cluster admins only) it mints a worker token instead: a worker "
            "presenting it joins pool P only (flux start worker --pool P) and calls nothing but the "
            "worker service, so a leaked one cannot bring a worker into another pool. The token "
            "is printed once, on stdout alone, for $(flux token create --tenant ml).",
        )
    )
    create.add_argument("--tenant", default="", metavar="NAME", help="the tenant the token speaks for")
    create.add_argument("--role", default=None, choices=TENANT_ROLES, help="what it may do (default submit)")
    create.add_argument(
        "--worker", action="store_true", help="a worker token, bound to the pool --pool names (no --tenant)"
    )
    create.add_argument("--pool", default="", metavar="POOL", help="with --worker: the only pool it may join")
    create.add_argument(
        "--expires-in", type=duration("--expires-in"), default=None, metavar="DURATION",
        help="refuse it after this long: 30d, 12h, 90m, 3600s (default: never; revoke it with flux token revoke)",
    )  # fmt: skip
    create.add_argument("--name", default="", metavar="N", help="a label for flux token list (e.g. ci)")
    create.set_defaults(run=command("tenants", "create_token"))
    listing = with_server(
        token.add_parser(
            "list",
            help="tenants' tokens: id, name, tenant, role, created, expires, last used (never a secret)",
            description="List the tokens not revoked, newest first: a tenant admin's token lists its own "
            "tenant's, a cluster admin's every tenant's. The tokens themselves are never shown: only "
            "their digests are stored. Last use is recorded to the minute.",
        )
    )
    listing.add_argument("--tenant", default="", metavar="T", help="only this tenant's tokens")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=command("tenants", "list_tokens"))
    revoke = with_server(
        token.add_parser(
            "revoke",
            help="revoke a token by its id (refused on every replica within a second)",
            description="Revoke a tenant's token by the id flux token list shows. Calls with it are "
            "refused at once on this server and within a second on every replica. A tenant admin "
            "revokes its own tenant's tokens only.",
        )
    )
    revoke.add_argument("id", metavar="ID", help="the token's id, as flux token list shows it")
    revoke.set_defaults(run=command("tenants", "revoke_token"))
    show = token.add_parser(
        "show",
        help="print a generated token (run it where the server runs: it reads ./.flux/)",
        description="Print the token the server generated into ./.flux/ on its first start in this "
        "directory: the worker join token, the client API token, or both (labelled) when none is named.",
    )
    show.add_argument(
        "role",
        nargs="?",
        choices=tuple(role.value for role in Role),
        help="which token (default: both, labelled)",
    )
    show.set_defaults(run=command("tokens", "show_token"))

    pool = commands.add_parser("pool", help="worker pools and the demand on them").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    apply = with_server(pool.add_parser("apply", help="declare or replace pools from a YAML or JSON file"))
    apply.add_argument("file", metavar="FILE", help="pools file ('-' reads stdin)")
    apply.set_defaults(run=command("pools", "apply_pools"))
    listing = with_server(pool.add_parser("list", help="every pool with its workers and demand"))
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=command("pools", "list_pools"))
    show = with_server(pool.add_parser("show", help="one pool: its shape, workers and demand"))
    show.add_argument("name", metavar="NAME", help="the pool's name")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(run=command("pools", "show_pool"))

    tenant = commands.add_parser(
        "tenant", help="tenants: quotas, cohorts, fair-share weights"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    create = with_server(tenant.add_parser("create", help="create a tenant"))
    create.add_argument("name", metavar="NAME", help="the tenant's name")
    _tenant_terms(create)
    create.set_defaults(run=command("tenants", "create_tenant"))
    listing = with_server(tenant.add_parser("list", help="every tenant with its terms"))
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=command("tenants", "list_tenants"))
    show = with_server(tenant.add_parser("show", help="one tenant's terms"))
    show.add_argument("name", metavar="NAME", help="the tenant's name")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(run=command("tenants", "show_tenant"))
    change = with_server(tenant.add_parser("set", help="change some of a tenant's terms"))
    change.add_argument("name", metavar="NAME", help="the tenant's name")
    _tenant_terms(change)
    change.add_argument(
        "--unset", action="append", default=[], choices=FIELDS, metavar="FIELD",
        help=f"clear a field (repeatable): {', '.join(FIELDS)}",
    )  # fmt: skip
    change.set_defaults(run=command("tenants", "set_tenant"))
    delete = with_server(tenant.add_parser("delete", help="delete a tenant and its tokens"))
    delete.add_argument("name", metavar="NAME", help="the tenant's name")
    delete.set_defaults(run=command("tenants", "delete_tenant"))
    apply = with_server(tenant.add_parser("apply", help="create or replace tenants from a YAML or JSON file"))
    apply.add_argument("file", metavar="FILE", help="tenants file ('-' reads stdin)")
    apply.set_defaults(run=command("tenants", "apply_tenants"))

    audit = commands.add_parser("audit", help="who changed what: the audit trail").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = with_server(
        audit.add_parser(
            "list",
            help="administrative changes, newest first (a tenant admin sees its own tenant's)",
            description="List administrative changes, newest first: tenants created, set, applied or "
            "deleted, tokens created or revoked, workflows registered, pools applied, workers paused, "
            "resumed or forgotten; who made each (the token's id, tenant and role; an empty id is "
            "the server's own token), what, and when. Kept 90 days, at most 100,000 entries.",
        )
    )
    listing.add_argument(
        "--since", type=duration("--since"), default=None, metavar="DURATION",
        help="only changes this recent: 90m, 12h, 7d",
    )  # fmt: skip
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=command("tenants", "list_audit"))

    status = with_server(commands.add_parser("status", help="the fleet and the pending queue at a glance"))
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(run=command("status", "cluster_status"))

    # Also after the subcommand (`flux start worker w1 --log-level DEBUG`); SUPPRESS leaves the
    # value given before it (or the default) in place when the subcommand does not repeat it.
    for leaf in leaf_parsers(parser):
        leaf.add_argument("--log-level", default=argparse.SUPPRESS, help=LOG_LEVEL_HELP)
    return parser
