"""Named limits on the wire: ``flux.v1.Limit`` to and from ``flux.domain.named_limits.NamedLimit``."""

from __future__ import annotations

from typing import Any

from flux.domain.named_limits import NamedLimit
from flux.errors import InvalidArgument
from flux.v1 import limits_pb2


def limit_to_proto(limit: NamedLimit, tenant: str = "") -> limits_pb2.Limit:
    message = limits_pb2.Limit(
        name=limit.name, rate=limit.rate or "", burst=limit.burst or 0, per_key=limit.per_key, tenant=tenant
    )
    if limit.concurrency is not None:
        message.concurrency = limit.concurrency
    return message


def limit_from_proto(message: limits_pb2.Limit, field: str = "limit") -> NamedLimit:
    """Checked as the domain checks it; the error names ``field`` (InvalidArgument)."""
    try:
        return NamedLimit(
            message.name,
            message.concurrency if message.HasField("concurrency") else None,
            message.rate or None,
            message.burst or None,
            message.per_key,
        )
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def limit_to_dict(message: limits_pb2.Limit) -> dict[str, Any]:
    """What ``--json`` and the gateway show: the stored fields, absent ones as null."""
    return {
        "name": message.name,
        "tenant": message.tenant,
        "concurrency": message.concurrency if message.HasField("concurrency") else None,
        "rate": message.rate or None,
        "burst": message.burst or None,
        "per_key": message.per_key,
    }
