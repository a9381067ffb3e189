"""Named limits: a tenant's limits shared across workflows (``flux limit create openai``).

A ``NamedLimit`` has a concurrency (at most N executions of the workflows naming it SCHEDULED or
RUNNING at once), a rate (a token bucket, ``"100/m"``, ``burst`` tokens at most), or both.
Without ``per_key`` it is one budget for the whole tenant; with it, one budget per key, the key
each workflow declares (its concurrency key, else its rate limit's) or a run's ``key=``.

A workflow names limits with ``limits=["openai"]``; a name the tenant has not created limits
nothing until it is created (so a workflow may be registered before its limits are), and a
change applies to waiting work at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flux.domain.limits import MAX_BURST, MAX_CONCURRENCY, parse_rate, validate_limit_name

FIELDS = ("concurrency", "rate", "burst", "per_key")


def _count(value: object, field_name: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{field_name} must be an int between 1 and {most}; got {type(value).__name__} {value!r}"
        )
    if not 1 <= value <= most:
        raise ValueError(f"{field_name} must be an int between 1 and {most}; got {value}")
    return value


@dataclass(frozen=True, slots=True)
class NamedLimit:
    name: str
    concurrency: int | None = None
    rate: str | None = None
    burst: int | None = None
    per_key: bool = False

    def __post_init__(self) -> None:
        validate_limit_name(self.name)
        if self.concurrency is not None:
            _count(self.concurrency, "concurrency", MAX_CONCURRENCY)
        if self.rate is not None:
            parse_rate(self.rate, "rate")
        if self.burst is not None:
            _count(self.burst, "burst", MAX_BURST)
            if self.rate is None:
                raise ValueError(f"limit {self.name!r}: burst needs a rate, e.g. --rate 100/m --burst 10")
        if not isinstance(self.per_key, bool):
            raise TypeError(f"per_key must be true or false; got {self.per_key!r}")
        if self.concurrency is None and self.rate is None:
            raise ValueError(
                f"limit {self.name!r} limits nothing: give it a concurrency, a rate or both, "
                "e.g. flux limit create openai --concurrency 10 --rate 100/m"
            )

    @property
    def per_second(self) -> float:
        return parse_rate(self.rate) if self.rate is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "rate": self.rate,
            "burst": self.burst,
            "per_key": self.per_key,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], name: str | None = None) -> NamedLimit:
        """From a stored document or an applied file's entry (``name`` from the row when given)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a limit is a mapping of {', '.join(FIELDS)}; got {type(data).__name__}")
        unknown = set(data) - {*FIELDS, "name"}
        if unknown:
            raise ValueError(
                f"unknown limit field(s) {sorted(unknown)}; the fields are name, {', '.join(FIELDS)}"
            )
        return cls(
            name if name is not None else data.get("name"),  # type: ignore[arg-type]
            data.get("concurrency"),
            data.get("rate"),
            data.get("burst"),
            False if data.get("per_key") is None else data["per_key"],
        )

    def updated(self, changes: Mapping[str, Any]) -> NamedLimit:
        """This limit with some fields changed (``None`` clears concurrency, rate or burst)."""
        if "name" in changes:
            raise ValueError("a limit's name cannot change; delete it and create another")
        data = self.to_dict()
        data.update(changes)
        return NamedLimit.from_dict(data, self.name)
