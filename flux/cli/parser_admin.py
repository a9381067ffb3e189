"""The ``flux`` command's administrative groups: ``token``, ``pool``, ``tenant`` and ``audit``.

Part of the argparse tree ``flux.cli.parser`` builds; ``with_server`` (the flags every client
command takes) lives here so both modules share it without importing each other.
"""

from __future__ import annotations

import argparse

from flux.cli.arguments import duration
from flux.cli.commands.lazy import command
from flux.cli.parser_batches import add_batches
from flux.cli.parser_limits import add_limits
from flux.cli.parser_schedules import add_schedules
from flux.defaults import default_server
from flux.domain.tenant import FIELDS
from flux.security import Role

TENANT_ROLES = ("read", "submit", "admin", "cluster-admin")


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


def add_admin(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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

    add_limits(commands, with_server)
    add_batches(commands, with_server)
    add_schedules(commands, with_server)

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
