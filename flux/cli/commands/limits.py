"""``flux limit create|set|delete|list|show NAME …``, ``flux limit apply FILE``.

A limits file is YAML or JSON, as a tenants file::

    limits:
      - name: openai
        concurrency: 10
        rate: 100/m
        burst: 10
      - name: crm
        concurrency: 1
        per_key: true        # one per key: the workflow's key, or a run's --key

It is validated here first (every error names its field), then again by the server.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from flux.cli.commands.tenants import read_document
from flux.cli.support import ServiceCalls
from flux.domain.named_limits import NamedLimit
from flux.errors import InvalidArgument


def _service(args: argparse.Namespace) -> ServiceCalls:
    from flux.v1 import limits_pb2_grpc

    return ServiceCalls(args, limits_pb2_grpc.LimitServiceStub)


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    fields = {
        "concurrency": args.concurrency,
        "rate": args.rate,
        "burst": args.burst,
        "per_key": args.per_key,
    }
    return {name: value for name, value in fields.items() if value is not None}


def _checked(data: Any, where: str, name: str | None = None) -> NamedLimit:
    try:
        return NamedLimit.from_dict(data, name)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


def _to_proto(limit: NamedLimit) -> Any:
    from flux.server.limit_convert import limit_to_proto

    return limit_to_proto(limit)


def _terms(message: Any) -> str:
    parts = []
    if message.HasField("concurrency"):
        parts.append(f"concurrency {message.concurrency}")
    if message.rate:
        parts.append(f"rate {message.rate}" + (f" burst {message.burst}" if message.burst else ""))
    if message.per_key:
        parts.append("per key")
    return ", ".join(parts)


def create_limit(args: argparse.Namespace) -> int:
    from flux.v1 import limits_pb2

    limit = _checked(_changes(args), "flux limit create", args.name)
    with _service(args) as service:
        answer = service.call(
            "CreateLimit", limits_pb2.CreateLimitRequest(limit=_to_proto(limit), tenant=args.tenant)
        )
    print(f"limit {answer.limit.name} created in tenant {answer.limit.tenant} ({_terms(answer.limit)})")
    return 0


def set_limit(args: argparse.Namespace) -> int:
    from flux.v1 import limits_pb2

    changes: dict[str, Any] = {**_changes(args), **dict.fromkeys(args.unset)}
    if not changes:
        raise InvalidArgument(
            "flux limit set: give a field to change (e.g. --concurrency 4) or --unset FIELD"
        )
    request = limits_pb2.SetLimitRequest(name=args.name, changes_json=json.dumps(changes), tenant=args.tenant)
    with _service(args) as service:
        answer = service.call("SetLimit", request)
    print(f"limit {answer.limit.name} updated ({_terms(answer.limit)})")
    return 0


def delete_limit(args: argparse.Namespace) -> int:
    from flux.v1 import limits_pb2

    with _service(args) as service:
        service.call("DeleteLimit", limits_pb2.DeleteLimitRequest(name=args.name, tenant=args.tenant))
    print(f"limit {args.name} deleted")
    return 0


def apply_limits(args: argparse.Namespace) -> int:
    from flux.v1 import limits_pb2

    document = read_document(args.file)
    entries = document.get("limits") if isinstance(document, dict) else document
    if not isinstance(entries, list):
        raise InvalidArgument(
            f"{args.file}: expected a list of limits, or a mapping with key 'limits' holding one"
        )
    checked = [_checked(entry, f"{args.file}: limits[{i}]") for i, entry in enumerate(entries)]
    request = limits_pb2.ApplyLimitsRequest(limits=[_to_proto(lim) for lim in checked], tenant=args.tenant)
    with _service(args) as service:
        answer = service.call("ApplyLimits", request)
    for limit in answer.limits:
        print(f"limit {limit.name} applied ({_terms(limit)})")
    return 0


def list_limits(args: argparse.Namespace) -> int:
    from flux.cli.render.common import table
    from flux.server.limit_convert import limit_to_dict
    from flux.v1 import limits_pb2

    with _service(args) as service:
        answer = service.call("ListLimits", limits_pb2.ListLimitsRequest(tenant=args.tenant))
    if args.json:
        print(json.dumps({"limits": [limit_to_dict(m) for m in answer.limits]}))
        return 0
    rows = [
        (
            m.name,
            str(m.concurrency) if m.HasField("concurrency") else "-",
            m.rate or "-",
            str(m.burst or 1) if m.rate else "-",
            "yes" if m.per_key else "no",
        )
        for m in answer.limits
    ]
    print(table(("NAME", "CONCURRENCY", "RATE", "BURST", "PER KEY"), rows))
    return 0


def show_limit(args: argparse.Namespace) -> int:
    from flux.cli.render.common import table
    from flux.server.limit_convert import limit_to_dict
    from flux.v1 import limits_pb2

    request = limits_pb2.GetLimitRequest(name=args.name, tenant=args.tenant, top=max(1, args.top))
    with _service(args) as service:
        answer = service.call("GetLimit", request)
    keys = [{"key": k.key, "in_use": k.in_use, "waiting": k.waiting} for k in answer.keys]
    if args.json:
        print(json.dumps({**limit_to_dict(answer.limit), "keys": keys, "key_count": answer.key_count}))
        return 0
    print(f"limit {answer.limit.name} (tenant {answer.limit.tenant}): {_terms(answer.limit)}")
    if not keys:
        print("  nothing in use or waiting")
        return 0
    shown = f"the {len(keys)} busiest of {answer.key_count} keys" if answer.key_count > len(keys) else "keys"
    print(f"  {shown}:")
    print(
        table(
            ("KEY", "IN USE", "WAITING"),
            [(k["key"] or "-", str(k["in_use"]), str(k["waiting"])) for k in keys],
        )
    )
    return 0
