"""Tenants on the wire: ``flux.v1.Tenant`` to and from ``flux.domain.tenant.Tenant`` (server and clients)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flux.domain.tenant import ADMISSION, RESOURCES, Limits, Tenant
from flux.errors import InvalidArgument
from flux.v1 import tenants_pb2


def limits_to_proto(limits: Limits) -> tenants_pb2.TenantLimits:
    return tenants_pb2.TenantLimits(
        **{r: v for r, v in zip(RESOURCES, limits.as_tuple(), strict=True) if v is not None}
    )


def limits_from_proto(message: tenants_pb2.TenantLimits, field: str) -> dict[str, int]:
    return {r: getattr(message, r) for r in RESOURCES if message.HasField(r)}


def tenant_to_proto(tenant: Tenant) -> tenants_pb2.Tenant:
    return tenants_pb2.Tenant(
        name=tenant.name,
        quota=limits_to_proto(tenant.quota),
        cohort=tenant.cohort,
        borrowing_limit=limits_to_proto(tenant.borrowing_limit),
        lending_limit=limits_to_proto(tenant.lending_limit),
        weight=tenant.weight,
        max_pending=tenant.max_pending,
        max_pending_bytes=tenant.max_pending_bytes,
    )


def tenant_from_proto(message: tenants_pb2.Tenant, field: str = "tenant") -> Tenant:
    """Checked as the apply file's form is, so a bad value is refused naming its field."""
    data: dict[str, Any] = {"name": message.name, **limits_from_proto(message.quota, "quota")}
    if message.cohort:
        data["cohort"] = message.cohort
    for name in ("borrowing_limit", "lending_limit"):
        amounts = limits_from_proto(getattr(message, name), name)
        if amounts:
            data[name] = amounts
    if message.weight:
        data["weight"] = message.weight
    for name in ADMISSION:
        if message.HasField(name):
            data[name] = getattr(message, name)
    try:
        return Tenant.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def tenant_statuses_to_proto(
    tenants: Iterable[tuple[str, tuple[int, ...], Limits, int]],
) -> list[tenants_pb2.TenantStatus]:
    """Each tenant's (name, usage, quota, pending) from ``flux.observe.status``."""
    return [
        tenants_pb2.TenantStatus(
            name=name,
            usage=tenants_pb2.TenantLimits(**dict(zip(RESOURCES, usage, strict=True))),
            quota=limits_to_proto(quota),
            pending=pending,
        )
        for name, usage, quota, pending in tenants
    ]
