"""Flow control declared on a workflow: concurrency per key, a rate limit, named limits.

``Concurrency(max=5, key="customer")``: at most ``max`` executions of one key are SCHEDULED or
RUNNING at once; ``key`` is a dotted path into a JSON object input (``"customer"``,
``"order.region"``), no key: the whole workflow is one key. ``RateLimit("100/m", key=, burst=)``:
a token bucket per key, refilled continuously, ``burst`` tokens at most (default 1, so starts are
spread evenly: the rate holds over any window, not only on average). ``limits=["openai"]``: named
limits of the tenant, shared across workflows (``flux limit create``).

All three are plain values validated where they are built (the decorator, a stored row, a run's
``key=``), so a bad one never reaches the dispatcher. ``Flow`` carries them together, with the
one JSON form both stores keep.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

RATE_FORM = "'N/s', 'N/m' or 'N/h' with N a positive number, e.g. '100/m'"
KEY_FORM = "a dotted path into a JSON object input, e.g. 'customer' or 'order.region'"
LIMIT_NAME_FORM = "1-64 characters: letters, digits, '_', '.', '-', starting with a letter or digit"
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(s|m|h)\s*")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*")
_LIMIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# A key value is stored and shown; bounded so a huge input field cannot become a huge key.
MAX_KEY_LENGTH = 256
MAX_CONCURRENCY = 1_000_000
MAX_BURST = 1_000_000


def _key(value: object, field_name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field_name} must be {KEY_FORM}, or None; got {type(value).__name__} {value!r}")
    if not _KEY.fullmatch(value) or len(value) > 128:
        raise ValueError(f"{field_name} must be {KEY_FORM}; got {value!r}")
    return value


def _count(value: object, field_name: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{field_name} must be an int between 1 and {most}; got {type(value).__name__} {value!r}"
        )
    if not 1 <= value <= most:
        raise ValueError(f"{field_name} must be an int between 1 and {most}; got {value}")
    return value


def parse_rate(value: object, field_name: str = "rate") -> float:
    """Tokens per second from ``"100/m"`` (see ``RATE_FORM``); the error names ``field_name``."""
    if not isinstance(value, str):
        raise TypeError(f"{field_name} must be {RATE_FORM}; got {type(value).__name__} {value!r}")
    found = _RATE.fullmatch(value)
    if found is None:
        raise ValueError(f"{field_name} must be {RATE_FORM}; got {value!r}")
    per_second = float(found.group(1)) / _PER[found.group(2)]
    if not math.isfinite(per_second) or per_second <= 0 or per_second > 1e6:
        raise ValueError(f"{field_name} must be {RATE_FORM}, above 0 and at most 1,000,000/s; got {value!r}")
    return per_second


def validate_limit_name(value: object, field_name: str = "limit name") -> str:
    if not isinstance(value, str) or not _LIMIT_NAME.fullmatch(value):
        raise ValueError(f"{field_name} {value!r} is invalid; a limit name is {LIMIT_NAME_FORM}")
    return value


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most ``max`` executions of one key SCHEDULED or RUNNING at once (no key: the workflow)."""

    max: int
    key: str | None = None

    def __post_init__(self) -> None:
        _count(self.max, "Concurrency.max", MAX_CONCURRENCY)
        _key(self.key, "Concurrency.key")

    def to_json(self) -> dict[str, Any]:
        return {"max": self.max, "key": self.key}


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A token bucket per key: ``rate`` (``"100/m"``), at most ``burst`` tokens saved up (default 1)."""

    rate: str
    key: str | None = None
    burst: int | None = None
    per_second: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_second", parse_rate(self.rate, "RateLimit.rate"))
        _key(self.key, "RateLimit.key")
        if self.burst is not None:
            _count(self.burst, "RateLimit.burst", MAX_BURST)

    @property
    def bucket(self) -> int:
        return self.burst or 1

    def to_json(self) -> dict[str, Any]:
        return {"rate": self.rate, "key": self.key, "burst": self.burst}


@dataclass(frozen=True, slots=True)
class Flow:
    """A workflow's flow control; the empty one limits nothing."""

    concurrency: Concurrency | None = None
    rate_limit: RateLimit | None = None
    limits: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return self.concurrency is None and self.rate_limit is None and not self.limits

    def to_json(self) -> str:
        if self.empty:
            return ""
        return json.dumps(
            {
                "concurrency": self.concurrency.to_json() if self.concurrency else None,
                "rate_limit": self.rate_limit.to_json() if self.rate_limit else None,
                "limits": list(self.limits),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Flow:
        if not text:
            return cls()
        data = json.loads(text)
        return flow_of(
            Concurrency(**data["concurrency"]) if data.get("concurrency") else None,
            RateLimit(**data["rate_limit"]) if data.get("rate_limit") else None,
            data.get("limits") or None,
        )

    def keys_for(self, input_json: str, key: str | None = None) -> dict[str, str]:
        """The resolved key of each keyed part ("concurrency", "rate_limit"; "limits" for named
        limits kept per key, which use the concurrency key, else the rate limit's): ``key`` (a run's
        ``key=``) overrides them all. Raises ValueError naming the missing field."""
        keys: dict[str, str] = {}
        parts = (("concurrency", self.concurrency), ("rate_limit", self.rate_limit))
        data: Any = None
        loaded = False
        for name, part in parts:
            if part is None:
                continue
            if key is not None:
                keys[name] = key
            elif part.key is not None:
                if not loaded:
                    data, loaded = json.loads(input_json or "null"), True
                keys[name] = key_of(data, part.key, f"{type(part).__name__}.key")
            else:
                keys[name] = ""  # the whole workflow is one key (and the execution is limited)
        if self.limits:
            keys["limits"] = key if key is not None else keys.get("concurrency") or keys.get("rate_limit", "")
        return keys


def flow_of(concurrency: object = None, rate_limit: object = None, limits: object = None) -> Flow:
    """A declaration's flow control, checked; the errors name the field and its form."""
    if concurrency is not None and not isinstance(concurrency, Concurrency):
        raise TypeError(
            "concurrency must be a Concurrency, e.g. Concurrency(max=5, key='customer'); "
            f"got {type(concurrency).__name__}"
        )
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise TypeError(
            f"rate_limit must be a RateLimit, e.g. RateLimit('100/m', key='customer'); got {type(rate_limit).__name__}"
        )
    names: tuple[str, ...] = ()
    if limits is not None:
        if isinstance(limits, str) or not isinstance(limits, list | tuple):
            raise TypeError(
                f"limits must be a list of limit names, e.g. ['openai']; got {type(limits).__name__}"
            )
        names = tuple(validate_limit_name(n, f"limits[{i}]") for i, n in enumerate(limits))
        if len(set(names)) != len(names):
            raise ValueError(f"limits names a limit twice: {list(names)}")
    return Flow(concurrency, rate_limit, names)


def check_run_key(value: object, field_name: str = "key") -> str | None:
    """A run's ``key=``: any non-empty string up to MAX_KEY_LENGTH characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field_name} must be a string; got {type(value).__name__}")
    if not value or len(value) > MAX_KEY_LENGTH:
        raise ValueError(f"{field_name} must be 1-{MAX_KEY_LENGTH} characters; got {len(value)}")
    return value


def key_of(data: Any, path: str, field_name: str) -> str:
    """The value at the dotted ``path`` of an input, as a key: a string as it is, anything else as JSON."""
    value = data
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ValueError(
                f"{field_name} {path!r}: the input has no field {path!r} (it needs a JSON object with it)"
            )
        value = value[part]
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:MAX_KEY_LENGTH]


def keys_to_json(keys: dict[str, str]) -> str:
    return json.dumps(keys, sort_keys=True) if keys else ""


def keys_from_json(text: str) -> dict[str, str]:
    return json.loads(text) if text else {}


def flow_to_proto(flow: Flow) -> Any:
    from flux.v1 import control_pb2

    message = control_pb2.FlowControl(limits=list(flow.limits))
    if flow.concurrency is not None:
        message.concurrency.CopyFrom(
            control_pb2.ConcurrencyLimit(max=flow.concurrency.max, key=flow.concurrency.key or "")
        )
    if flow.rate_limit is not None:
        r = flow.rate_limit
        message.rate_limit.CopyFrom(
            control_pb2.RateLimitSpec(rate=r.rate, key=r.key or "", burst=r.burst or 0)
        )
    return message


def flow_from_proto(message: Any, field_name: str = "flow") -> Flow:
    """A registered workflow's flow control, checked as the decorator checks it (ValueError/TypeError)."""
    try:
        concurrency = (
            Concurrency(message.concurrency.max, message.concurrency.key or None)
            if message.HasField("concurrency")
            else None
        )
        rate = (
            RateLimit(
                message.rate_limit.rate, message.rate_limit.key or None, message.rate_limit.burst or None
            )
            if message.HasField("rate_limit")
            else None
        )
        return flow_of(concurrency, rate, list(message.limits) or None)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{field_name}: {exc}") from None
