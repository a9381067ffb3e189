"""``flux tenant create|list|show|set|delete NAME …``, ``flux tenant apply FILE``, ``flux token
create|list|revoke``, ``flux audit list``.

A tenants file is YAML (when PyYAML is installed) or JSON, the fields of DESIGN §9::

    tenants:
      - name: ml
        gpu: 4
        cohort: research
        borrowing_limit: {gpu: 2}
        weight: 2
      - name: web
        cpu: 32
        memory: 64Gi
        executions: 40        # scheduled or running at once, requests or not
        max_pending: 5000     # unfinished accepted at most (default: a fair share)
        max_pending_bytes: 1Gi

It is validated here first (every error names its field), then again by the server.
Every command needs an admin API token (the server's own, ``./.flux/api.token``, is one).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flux.cli.support import ServiceCalls, UsageError
from flux.domain.tenant import ADMISSION, RESOURCES, Tenant, describe_amount
from flux.errors import InvalidArgument


def _limits(value: str, flag: str) -> dict[str, str]:
    amounts: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        key, eq, amount = part.partition("=")
        if not eq or key.strip() not in RESOURCES or not amount.strip():
            raise InvalidArgument(
                f"{flag} {value!r} is invalid; use RESOURCE=AMOUNT pairs separated by commas, "
                f"RESOURCE one of {', '.join(RESOURCES)} (e.g. gpu=2,memory=8Gi)"
            )
        amounts[key.strip()] = amount.strip()
    return amounts


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for resource in RESOURCES:
        value = getattr(args, resource)
        if value is not None:
            changes[resource] = value
    if args.cohort is not None:
        changes["cohort"] = args.cohort
    if args.borrowing_limit is not None:
        changes["borrowing_limit"] = _limits(args.borrowing_limit, "--borrowing-limit")
    if args.lending_limit is not None:
        changes["lending_limit"] = _limits(args.lending_limit, "--lending-limit")
    if args.weight is not None:
        changes["weight"] = args.weight
    for name in ADMISSION:
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    return changes


def read_document(path: str) -> Any:
    """The document in ``path``: JSON, or YAML (PyYAML is a dependency of flux)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read tenants file {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidArgument(f"{path} is neither JSON nor YAML: {exc}") from None


def _checked(data: dict[str, Any], where: str) -> Tenant:
    try:
        return Tenant.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


def _tenants(args: argparse.Namespace) -> ServiceCalls:
    from flux.v1 import tenants_pb2_grpc

    return ServiceCalls(args, tenants_pb2_grpc.TenantServiceStub)


def _to_proto(tenant: Tenant) -> Any:
    from flux.server.tenant_convert import tenant_to_proto

    return tenant_to_proto(tenant)


def _from_proto(message: Any) -> Tenant:
    from flux.server.tenant_convert import tenant_from_proto

    return tenant_from_proto(message)


def _describe(tenant: Tenant) -> str:
    quota = ", ".join(
        describe_amount(r, v)
        for r, v in zip(RESOURCES, tenant.quota.as_tuple(), strict=True)
        if v is not None
    )
    return quota or "unlimited"


def _limits_text(tenant: Tenant, name: str) -> str:
    limits = getattr(tenant, name)
    return ", ".join(f"{r}={v}" for r, v in limits.to_dict().items()) or "-"


def create_tenant(args: argparse.Namespace) -> int:
    from flux.v1 import tenants_pb2

    tenant = _checked({"name": args.name, **_changes(args)}, "flux tenant create")
    with _tenants(args) as tenants:
        created = tenants.call("CreateTenant", tenants_pb2.CreateTenantRequest(tenant=_to_proto(tenant)))
    print(f"tenant {created.tenant.name} created (quota: {_describe(_from_proto(created.tenant))})")
    return 0


def set_tenant(args: argparse.Namespace) -> int:
    from flux.v1 import tenants_pb2

    changes: dict[str, Any] = {**_changes(args), **dict.fromkeys(args.unset)}
    if not changes:
        raise InvalidArgument(
            "flux tenant set: give at least one field to change (e.g. --gpu 4) or --unset FIELD"
        )
    with _tenants(args) as tenants:
        answer = tenants.call(
            "SetTenant", tenants_pb2.SetTenantRequest(name=args.name, changes_json=json.dumps(changes))
        )
    print(f"tenant {answer.tenant.name} updated (quota: {_describe(_from_proto(answer.tenant))})")
    return 0


def delete_tenant(args: argparse.Namespace) -> int:
    from flux.v1 import tenants_pb2

    with _tenants(args) as tenants:
        tenants.call("DeleteTenant", tenants_pb2.DeleteTenantRequest(name=args.name))
    print(f"tenant {args.name} deleted, with its tokens")
    return 0


def apply_tenants(args: argparse.Namespace) -> int:
    from flux.v1 import tenants_pb2

    document = read_document(args.file)
    entries = document.get("tenants") if isinstance(document, dict) else document
    if not isinstance(entries, list):
        raise InvalidArgument(
            f"{args.file}: expected a list of tenants, or a mapping with key 'tenants' holding one"
        )
    checked = [_checked(entry, f"{args.file}: tenants[{i}]") for i, entry in enumerate(entries)]
    with _tenants(args) as tenants:
        answer = tenants.call(
            "ApplyTenants", tenants_pb2.ApplyTenantsRequest(tenants=[_to_proto(t) for t in checked])
        )
    for tenant in answer.tenants:
        print(f"tenant {tenant.name} applied (quota: {_describe(_from_proto(tenant))})")
    return 0


def list_tenants(args: argparse.Namespace) -> int:
    from flux.cli.render.common import table
    from flux.v1 import tenants_pb2

    with _tenants(args) as tenants:
        answer = tenants.call("ListTenants", tenants_pb2.ListTenantsRequest())
    found = [_from_proto(t) for t in answer.tenants]
    if args.json:
        print(json.dumps({"tenants": [t.to_dict() for t in found]}))
        return 0
    header = ("NAME", "QUOTA", "COHORT", "BORROWING LIMIT", "LENDING LIMIT", "WEIGHT")
    rows = [
        (
            t.name,
            _describe(t),
            t.cohort or "-",
            _limits_text(t, "borrowing_limit"),
            _limits_text(t, "lending_limit"),
            f"{t.weight:g}",
        )
        for t in found
    ]
    print(table(header, rows))
    return 0


def show_tenant(args: argparse.Namespace) -> int:
    from flux.v1 import tenants_pb2

    with _tenants(args) as tenants:
        tenant = _from_proto(tenants.call("GetTenant", tenants_pb2.GetTenantRequest(name=args.name)).tenant)
    if args.json:
        print(json.dumps(tenant.to_dict()))
        return 0
    print(f"tenant {tenant.name}")
    print(f"  quota            {_describe(tenant)}")
    print(f"  cohort           {tenant.cohort or '-'}")
    print(f"  borrowing limit  {_limits_text(tenant, 'borrowing_limit')}")
    print(f"  lending limit    {_limits_text(tenant, 'lending_limit')}")
    print(f"  weight           {tenant.weight:g}")
    print(f"  max pending      {_admission_text(tenant)}")
    return 0


def _admission_text(tenant: Tenant) -> str:
    """``5000 executions, 1Gi of input``; absent parts are the server's fair share."""
    count = "fair share" if tenant.max_pending is None else describe_amount("executions", tenant.max_pending)
    size = (
        "fair share"
        if tenant.max_pending_bytes is None
        else describe_amount("memory", tenant.max_pending_bytes)
    )
    return f"{count}, {size} of input"


def create_token(args: argparse.Namespace) -> int:
    from flux.v1 import tenants_pb2

    if args.worker:
        if not args.pool or args.tenant or args.role:
            raise UsageError("a worker token takes --pool POOL and neither --tenant nor --role")
    elif args.pool:
        raise UsageError("--pool binds a worker token: add --worker")
    elif not args.tenant:
        raise UsageError("--tenant NAME is required (or --worker --pool POOL for a worker token)")
    request = tenants_pb2.CreateTokenRequest(
        tenant=args.tenant, role="" if args.worker else args.role or "submit", name=args.name,
        expires_in_seconds=max(1, round(args.expires_in)) if args.expires_in else 0,
        worker=args.worker, pool=args.pool,
    )  # fmt: skip
    with _tenants(args) as tenants:
        answer = tenants.call("CreateToken", request)
    # The token alone on stdout, for $(flux token create …); its id where a person reads it.
    print(answer.token)
    expires = f", expires {_when(answer.expires_at)}" if answer.expires_at else ""
    whose = f"for pool {args.pool}" if args.worker else f"of tenant {answer.tenant}"
    print(f"token {answer.id} {whose} ({answer.role}{expires})", file=sys.stderr)
    return 0


def _when(at: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at)) if at else "-"


def list_tokens(args: argparse.Namespace) -> int:
    from flux.cli.render.common import table
    from flux.v1 import tenants_pb2

    with _tenants(args) as tenants:
        answer = tenants.call("ListTokens", tenants_pb2.ListTokensRequest(tenant=args.tenant))
    if args.json:
        keys = ("id", "name", "tenant", "role", "pool", "created_at", "expires_at", "last_used_at")
        found = [
            {k: getattr(t, k) or None if k.endswith("_at") else getattr(t, k) for k in keys}
            for t in answer.tokens
        ]
        print(json.dumps({"tokens": found}))
        return 0
    header = ("ID", "NAME", "TENANT", "ROLE", "POOL", "CREATED", "EXPIRES", "LAST USED")
    rows = [
        (
            t.id,
            t.name or "-",
            t.tenant or "-",
            t.role,
            t.pool or "-",
            _when(t.created_at),
            _when(t.expires_at),
            _when(t.last_used_at),
        )
        for t in answer.tokens
    ]
    print(table(header, rows))
    return 0


def revoke_token(args: argparse.Namespace) -> int:
    from flux.v1 import tenants_pb2

    with _tenants(args) as tenants:
        answer = tenants.call("RevokeToken", tenants_pb2.RevokeTokenRequest(id=args.id))
    print(f"token {answer.token.id} of tenant {answer.token.tenant} revoked")
    return 0


def list_audit(args: argparse.Namespace) -> int:
    import time

    from flux.cli.render.common import table
    from flux.v1 import tenants_pb2

    since = time.time() - args.since if args.since else 0.0
    with _tenants(args) as tenants:
        answer = tenants.call("ListAudit", tenants_pb2.ListAuditRequest(since=since))
    if args.json:
        entries = [
            {
                "at": e.at, "token_id": e.token_id, "caller_tenant": e.caller_tenant, "caller_role": e.caller_role,
                "action": e.action, "target": e.target, "tenant": e.tenant, "details": json.loads(e.details_json or "{}"),
            }
            for e in answer.entries
        ]  # fmt: skip
        print(json.dumps({"entries": entries}))
        return 0
    header = ("WHEN", "WHO", "ACTION", "TARGET", "TENANT", "DETAILS")
    rows = [
        (
            _when(e.at),
            f"{e.token_id or 'server token'} ({e.caller_role} of {e.caller_tenant})",
            e.action,
            e.target,
            e.tenant or "-",
            e.details_json,
        )
        for e in answer.entries
    ]
    print(table(header, rows))
    return 0
