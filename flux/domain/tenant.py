"""A tenant: a named group of submitters with a quota, a cohort and a fair-share weight.

Quota fields (DESIGN §9, §10) are ``cpu`` (cores), ``memory`` (bytes), ``gpu``
(devices), ``gpu_memory`` (bytes of VRAM: an execution counts ``gpu ×
gpu_memory``) and ``executions`` (executions scheduled or running at once:
every execution counts one, whatever it requests, so work that asks for
nothing is not free). Each is the tenant's *nominal* quota; absent (None) means
unlimited, and an unlimited resource is neither lent nor borrowed.

Tenants sharing a ``cohort`` lend each other what they do not use (as
Kubernetes Kueue's ClusterQueues in a cohort): a member may go above its
nominal quota by at most its ``borrowing_limit`` (per resource; absent =
whatever the cohort has free), and ``lending_limit`` caps how much of its own
nominal quota the others may use (absent = all of it). ``weight`` (> 0,
default 1) scales its fair share: twice the weight, twice the resources when
tenants compete.

Admission (not quota: what may wait, not what may run): ``max_pending`` and
``max_pending_bytes`` cap the tenant's unfinished executions and their input
bytes; absent, the tenant gets its fair share of the server's
``--max-pending``/``--max-pending-bytes`` (``pending_share``), so one tenant's
backlog cannot fill the server's room and lock the others out of submitting.

Every check names the field and the accepted form, so a bad ``flux tenant
apply`` file or RPC fails at the value that is wrong.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from flux.domain.quantity import ACCEPTED_FORMS, format_bytes, parse_bytes, show_int

DEFAULT_TENANT = "default"
RESOURCES = ("cpu", "memory", "gpu", "gpu_memory", "executions")
# Counted resources take an int; byte resources take the quantity forms of ``memory``.
COUNTED = frozenset({"cpu", "gpu", "executions"})
MAX_COUNT = 2**31 - 1
MAX_WEIGHT = 1_000_000.0
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
NAME_FORM = "1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
ADMISSION = ("max_pending", "max_pending_bytes")
FIELDS = (*RESOURCES, "cohort", "borrowing_limit", "lending_limit", "weight", *ADMISSION)


@dataclass(frozen=True, slots=True)
class Limits:
    """One amount per quota resource; None = no limit on it."""

    cpu: int | None = None
    memory: int | None = None
    gpu: int | None = None
    gpu_memory: int | None = None
    executions: int | None = None

    def get(self, resource: str) -> int | None:
        value: int | None = getattr(self, resource)
        return value

    def as_tuple(self) -> tuple[int | None, int | None, int | None, int | None, int | None]:
        return (self.cpu, self.memory, self.gpu, self.gpu_memory, self.executions)

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.as_tuple())

    @classmethod
    def parse(cls, value: object, field_name: str) -> Limits:
        """From ``{"gpu": 2, "memory": "8Gi"}`` (or None: no limits)."""
        if value is None:
            return cls()
        if isinstance(value, Limits):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"{field_name} must be a mapping of resource to amount, e.g. {{gpu: 2, memory: '8Gi'}}; "
                f"got {type(value).__name__} {value!r}"
            )
        amounts: dict[str, int | None] = {}
        for key, amount in value.items():
            if key not in RESOURCES:
                raise ValueError(f"{field_name}: unknown resource {key!r}; use {', '.join(RESOURCES)}")
            amounts[key] = parse_amount(amount, f"{field_name}.{key}")
        return cls(**amounts)

    def to_dict(self) -> dict[str, int | str]:
        return {
            r: show_amount(r, v) for r, v in zip(RESOURCES, self.as_tuple(), strict=True) if v is not None
        }


def parse_amount(value: object, field_name: str) -> int | None:
    """A quota amount: None stays None (unlimited); ``cpu``/``gpu``/``executions`` ints, the others byte quantities."""
    if value is None:
        return None
    resource = field_name.rsplit(".", 1)[-1]
    if resource in COUNTED:
        return parse_count(value, field_name)
    try:
        return parse_bytes(value, field_name)
    except (TypeError, ValueError) as exc:
        raise type(exc)(str(exc) if ACCEPTED_FORMS in str(exc) else f"{exc}; use {ACCEPTED_FORMS}") from exc


def parse_count(value: object, field_name: str) -> int:
    """A whole number between 0 and ``MAX_COUNT`` (an int, an integral float or a digit string)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"{field_name} must be a whole number >= 0; got {type(value).__name__} {value!r}")
    if isinstance(value, str):
        if not value.strip().isdigit():
            raise ValueError(f"{field_name} must be a whole number >= 0; got {value!r}")
        value = int(value)
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError(f"{field_name} must be a whole number >= 0; got {value!r}")
        value = int(value)
    if value < 0 or value > MAX_COUNT:
        raise ValueError(f"{field_name} must be between 0 and {MAX_COUNT}; got {show_int(value)}")
    return value


def show_amount(resource: str, value: int) -> int | str:
    """JSON form: counts as ints, bytes as exact quantity strings (``"8Gi"``) where one exists."""
    if resource in COUNTED:
        return value
    for suffix, size in (("Pi", 1024**5), ("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if value and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


def describe_amount(resource: str, value: int) -> str:
    """For people: ``4 GPUs``, ``8.0 GiB``."""
    if resource == "cpu":
        return f"{value} core{'s' if value != 1 else ''}"
    if resource == "gpu":
        return f"{value} GPU{'s' if value != 1 else ''}"
    if resource == "executions":
        return f"{value} execution{'s' if value != 1 else ''}"
    return format_bytes(value)


def check_name(name: object, field_name: str = "name") -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"{field_name} {name!r} is invalid; a tenant name is {NAME_FORM}")
    return name


def parse_weight(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"weight must be a number > 0 (default 1); got {type(value).__name__} {value!r}")
    try:
        weight = float(value)
    except ValueError as exc:
        raise ValueError(f"weight must be a number > 0 (default 1); got {value!r}") from exc
    if not math.isfinite(weight) or weight <= 0 or weight > MAX_WEIGHT:
        raise ValueError(f"weight must be a number > 0 and at most {MAX_WEIGHT:g}; got {value!r}")
    return weight


def parse_max_pending(value: object) -> int | None:
    """``max_pending``: a whole number >= 1 (None: a fair share of the server's ``--max-pending``)."""
    if value is None:
        return None
    count = parse_count(value, "max_pending")
    if count < 1:
        raise ValueError(f"max_pending must be a whole number >= 1 (or absent: a fair share); got {value!r}")
    return count


def parse_max_pending_bytes(value: object) -> int | None:
    """``max_pending_bytes``: a byte quantity >= 1 (``"1Gi"``; None: a fair share of the server's)."""
    if value is None:
        return None
    size = parse_amount(value, "max_pending_bytes")
    assert size is not None
    if size < 1:
        raise ValueError(
            f"max_pending_bytes must be at least 1 byte (or absent: a fair share); got {value!r}"
        )
    return size


def pending_floor(limit: int, least: int) -> int:
    """The room any tenant without its own limit is promised: 1/16 of the server's limit, at most ``least``."""
    return max(1, min(limit // 16, least))


def pending_share(limit: int, waiting: int, floor: int) -> int:
    """A tenant's default admission limit: an equal part of the server's ``limit`` less ``floor``
    among the ``waiting`` tenants with unfinished work (itself counted), never below ``floor``.

    Why this rule: a lone tenant may fill all but ``floor`` of the server's room (15/16 of
    ``--max-pending`` or all but 100, whichever leaves it more), so the floor is always left
    for a tenant that arrives; from then on each tenant's part shrinks to an equal share as
    more tenants have work, so a tenant above its share admits nothing until it falls back
    under it, and the server's room converges to an equal split. The server's limit stays
    the hard cap over all of them.
    """
    return max(floor, (limit - floor) // max(1, waiting))


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    quota: Limits = field(default_factory=Limits)
    cohort: str = ""
    borrowing_limit: Limits = field(default_factory=Limits)
    lending_limit: Limits = field(default_factory=Limits)
    weight: float = 1.0
    # Admission: unfinished executions (and their input bytes) accepted at most; None: a fair
    # share of the server's limit (``pending_share``).
    max_pending: int | None = None
    max_pending_bytes: int | None = None

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.cohort:
            check_name(self.cohort, "cohort")
        if not self.cohort and not self.borrowing_limit.empty:
            raise ValueError(
                f"tenant {self.name}: borrowing_limit needs a cohort to borrow from; set cohort, or drop borrowing_limit"
            )
        for limit_name in ("borrowing_limit", "lending_limit"):
            limits: Limits = getattr(self, limit_name)
            for resource, amount in zip(RESOURCES, limits.as_tuple(), strict=True):
                if amount is not None and self.quota.get(resource) is None:
                    raise ValueError(
                        f"tenant {self.name}: {limit_name}.{resource} is set but {resource} has no quota "
                        f"(an unlimited resource is neither lent nor borrowed); set {resource} too"
                    )
        parse_weight(self.weight)
        if self.max_pending is not None:
            parse_max_pending(self.max_pending)
        if self.max_pending_bytes is not None:
            parse_max_pending_bytes(self.max_pending_bytes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], name: str | None = None) -> Tenant:
        """From the apply-file / JSON form: ``{name, cpu, memory, gpu, gpu_memory, executions, cohort,
        borrowing_limit, lending_limit, weight, max_pending, max_pending_bytes}``."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a tenant must be a mapping of its fields; got {type(data).__name__} {data!r}")
        unknown = sorted(set(data) - {"name", *FIELDS})
        if unknown:
            raise ValueError(f"unknown tenant field {unknown[0]!r}; the fields are name, {', '.join(FIELDS)}")
        tenant_name = check_name(name if name is not None else data.get("name"))
        cohort = data.get("cohort") or ""
        if not isinstance(cohort, str):
            raise TypeError(f"cohort must be a name ({NAME_FORM}); got {cohort!r}")
        weight = data.get("weight")
        return cls(
            name=tenant_name,
            quota=Limits(**{r: parse_amount(data.get(r), r) for r in RESOURCES}),
            cohort=cohort,
            borrowing_limit=Limits.parse(data.get("borrowing_limit"), "borrowing_limit"),
            lending_limit=Limits.parse(data.get("lending_limit"), "lending_limit"),
            weight=1.0 if weight is None else parse_weight(weight),
            max_pending=parse_max_pending(data.get("max_pending")),
            max_pending_bytes=parse_max_pending_bytes(data.get("max_pending_bytes")),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, **self.quota.to_dict()}
        if self.cohort:
            out["cohort"] = self.cohort
        if not self.borrowing_limit.empty:
            out["borrowing_limit"] = self.borrowing_limit.to_dict()
        if not self.lending_limit.empty:
            out["lending_limit"] = self.lending_limit.to_dict()
        out["weight"] = int(self.weight) if self.weight.is_integer() else self.weight
        if self.max_pending is not None:
            out["max_pending"] = self.max_pending
        if self.max_pending_bytes is not None:
            out["max_pending_bytes"] = show_amount("memory", self.max_pending_bytes)
        return out

    def updated(self, changes: Mapping[str, Any]) -> Tenant:
        """This tenant with some fields changed (``flux tenant set``); None clears a field."""
        merged = {**self.to_dict(), **changes}
        return Tenant.from_dict({k: v for k, v in merged.items() if v is not None}, self.name)

    def evolve(self, **changes: Any) -> Tenant:
        return replace(self, **changes)
