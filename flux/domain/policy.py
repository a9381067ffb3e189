"""What happens to an execution over time: its attempt timeout, retries, heartbeats, pending deadline.

``Retry`` and ``Policy`` are plain values, validated where they are built (a declaration, a run's
override, a stored row), so a bad value never reaches the dispatcher. Durations are seconds
everywhere inside Flux; people write them as ``"90s"``, ``"10m"``, ``"1h30m"`` or a number.

A retried attempt waits ``min(max_delay, initial_delay * backoff ** (n - 1))`` after its n-th
failure, with "equal jitter" when ``jitter`` is on: a uniform pick in [delay / 2, delay], so a
burst of failures does not come back in lockstep, and a wait is never more than twice shorter
than the formula (Celery's full jitter can retry at once, which defeats a backoff).
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from flux.domain.attempts import (  # noqa: F401 (one name for every use of an attempt record)
    ATTEMPT_MESSAGE_BYTES,
    Attempt,
    attempt_from_proto,
    attempt_to_proto,
    attempts_from_json,
    attempts_json,
)
from flux.domain.duration import MAX_DURATION, seconds_of

MAX_ATTEMPTS_LIMIT = 100
DEFAULT_MAX_ATTEMPTS = 3

# Why an attempt ended, and why a FAILED execution failed (DESIGN §10 names the last five).
COMPLETED = "completed"
ERROR = "error"
TIMEOUT = "timeout"
HEARTBEAT_TIMEOUT = "heartbeat_timeout"
PENDING_TIMEOUT = "pending_timeout"
WORKER_LOST = "worker_lost"
PREEMPTED = "preempted"  # an attempt stopped for a tenant's quota: never counted against max_attempts
FAILURE_REASONS = (ERROR, TIMEOUT, HEARTBEAT_TIMEOUT, PENDING_TIMEOUT, WORKER_LOST)
# The labels of flux_retries_total{reason} and flux_timeouts_total{kind}, each always exported.
RETRY_REASONS = (ERROR, TIMEOUT, HEARTBEAT_TIMEOUT, WORKER_LOST)
TIMEOUT_KINDS = (TIMEOUT, HEARTBEAT_TIMEOUT, PENDING_TIMEOUT)
# The error type a stopped attempt is reported with (the body raised nothing itself).
TIMEOUT_ERROR = {TIMEOUT: "AttemptTimeout", HEARTBEAT_TIMEOUT: "HeartbeatTimeout", WORKER_LOST: "WorkerLost"}


def parse_duration(value: object, field_name: str) -> float:
    """Seconds from ``value`` (flux/domain/duration.py, at most a year); the error names ``field_name``."""
    return seconds_of(value, field_name, at_most=MAX_DURATION)


def optional_duration(value: object, field_name: str) -> float | None:
    return None if value is None else parse_duration(value, field_name)


def format_duration(seconds: float) -> str:
    """The shortest of ``1.5s``, ``90s``, ``10m``, ``1h30m`` that says ``seconds`` exactly enough."""
    if seconds < 60 or seconds % 60:
        return f"{seconds:g}s"
    minutes = int(seconds // 60)
    if minutes < 60 or minutes % 60 == 0 and minutes < 120:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m" if minutes else f"{hours}h"


def _names(value: object, field_name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(
            f"{field_name} must be a list of exception type names, e.g. ['ConnectionError']; got {value!r}"
        )
    names = []
    for item in value:
        if isinstance(item, type) and issubclass(item, BaseException):
            item = item.__name__  # a class is accepted where it is at hand; stored by name
        if not isinstance(item, str) or not item.isidentifier():
            raise ValueError(f"{field_name} holds {item!r}; each item is an exception type name")
        names.append(item)
    return tuple(names)


@dataclass(frozen=True, slots=True)
class Retry:
    """How a failed attempt is tried again (Temporal's RetryPolicy, Celery's autoretry).

    ``max_attempts`` counts every try, the first included. ``retry_on`` (when given) lists the
    only exception names retried; ``no_retry_on`` names never retried, winning over ``retry_on``.
    A name matches the raised type or any of its bases. Attempts that time out (``timeout``,
    ``heartbeat_timeout``) or whose worker is lost are retried unless the lists leave out
    ``AttemptTimeout`` / ``HeartbeatTimeout`` / ``WorkerLost``.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_delay: float | str = 1.0
    backoff: float = 2.0
    max_delay: float | str = 300.0
    jitter: bool = True
    retry_on: tuple[str, ...] = field(default=())
    no_retry_on: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: validated values replace the given ones once, here
        set_(self, "max_attempts", check_max_attempts(self.max_attempts, "Retry.max_attempts"))
        set_(self, "initial_delay", _delay(self.initial_delay, "Retry.initial_delay"))
        set_(self, "max_delay", _delay(self.max_delay, "Retry.max_delay"))
        if isinstance(self.backoff, bool) or not isinstance(self.backoff, int | float):
            raise TypeError(
                f"Retry.backoff must be a number >= 1 (the growth per retry); got {self.backoff!r}"
            )
        if not (math.isfinite(self.backoff) and 1 <= self.backoff <= 100):
            raise ValueError(
                f"Retry.backoff must be between 1 and 100 (the growth per retry); got {self.backoff}"
            )
        set_(self, "backoff", float(self.backoff))
        if not isinstance(self.jitter, bool):
            raise TypeError(f"Retry.jitter must be True or False; got {self.jitter!r}")
        set_(self, "retry_on", _names(self.retry_on, "Retry.retry_on"))
        set_(self, "no_retry_on", _names(self.no_retry_on, "Retry.no_retry_on"))
        if self.max_delay < self.initial_delay:  # type: ignore[operator]
            raise ValueError(
                f"Retry.max_delay ({self.max_delay:g}s) must be at least Retry.initial_delay "
                f"({self.initial_delay:g}s)"
            )

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the ``failures``-th failed attempt (1 for the first)."""
        exponent = max(0, failures - 1)
        base = self.initial_delay * self.backoff ** min(exponent, 200)  # type: ignore[operator]
        delay = min(float(self.max_delay), base)  # type: ignore[arg-type]
        if self.jitter:
            delay = (rng or random).uniform(delay / 2, delay)
        return delay

    def retries(self, names: Iterable[str]) -> bool:
        """Whether an attempt that failed with an exception named (with its bases) ``names`` is retried."""
        found = set(names)
        if found & set(self.no_retry_on):
            return False
        return not self.retry_on or bool(found & set(self.retry_on))

    def to_dict(self) -> dict[str, object]:
        return {
            "max_attempts": self.max_attempts,
            "initial_delay": self.initial_delay,
            "backoff": self.backoff,
            "max_delay": self.max_delay,
            "jitter": self.jitter,
            "retry_on": list(self.retry_on),
            "no_retry_on": list(self.no_retry_on),
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Retry:
        return cls(**data)  # type: ignore[arg-type]


def _delay(value: object, field_name: str) -> float:
    if value == 0 and not isinstance(value, bool):
        return 0.0  # no wait at all is a valid choice for a delay (not for a timeout)
    return parse_duration(value, field_name)


def check_max_attempts(value: object, field_name: str = "max_attempts") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{field_name} must be an int between 1 and {MAX_ATTEMPTS_LIMIT}; got {type(value).__name__} {value!r}"
        )
    if not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise ValueError(f"{field_name} must be between 1 and {MAX_ATTEMPTS_LIMIT}; got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Policy:
    """An execution's policies over time; a workflow declares one, a run may override parts of it.

    ``timeout``: one attempt, from its claim to its result (preempted run time counts too).
    ``heartbeat_timeout``: an attempt silent longer is lost. ``pending_timeout``: an execution
    that has not started within it, counted from its submission, fails. None: not limited.
    """

    retry: Retry = field(default_factory=Retry)
    timeout: float | None = None
    heartbeat_timeout: float | None = None
    pending_timeout: float | None = None
    # Errors the body raises are retried (a ``retry`` was declared or given with the run). Without
    # one, as before policies existed (and as Ray's retry_exceptions=False): an error ends the
    # execution at once, and only timeouts and lost workers use up ``max_attempts``.
    retry_errors: bool = False

    @property
    def max_attempts(self) -> int:
        return self.retry.max_attempts

    def is_default(self) -> bool:
        return self == default_policy(self.retry.max_attempts)

    def to_json(self) -> str:
        return json.dumps(
            {
                "retry": self.retry.to_dict(),
                "timeout": self.timeout,
                "heartbeat_timeout": self.heartbeat_timeout,
                "pending_timeout": self.pending_timeout,
                "retry_errors": self.retry_errors,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Policy:
        """A stored policy; "" (rows from before policies) is the default with ``max_attempts``."""
        if not text:
            return default_policy(max_attempts)
        data = json.loads(text)
        return cls(
            retry=Retry.from_dict(data["retry"]),
            timeout=data.get("timeout"),
            heartbeat_timeout=data.get("heartbeat_timeout"),
            pending_timeout=data.get("pending_timeout"),
            retry_errors=data.get("retry_errors", False),
        )

    def overridden(self, timeout: float | None = None, retry: Retry | None = None) -> Policy:
        """This policy with a run's ``attempt_timeout`` and ``retry`` in place of the declared ones."""
        changed = self
        if timeout is not None:
            changed = replace(changed, timeout=parse_duration(timeout, "attempt_timeout"))
        if retry is not None:
            changed = replace(changed, retry=retry, retry_errors=True)
        return changed


# with_options's default for max_attempts: "not given" (None is an invalid value, refused as such).
UNSET: Any = object()


def policy_of(
    max_attempts: object,
    retry: object,
    timeout: object,
    heartbeat_timeout: object,
    pending_timeout: object,
) -> Policy:
    """A declaration's policy, validated (``with_options``'s fields, each named in its error).

    ``max_attempts`` given alone becomes the retry's; given with a ``retry`` it must agree with it.
    """
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(
            f"retry must be a Retry, e.g. Retry(max_attempts=5, initial_delay='1s'); got {type(retry).__name__}"
        )
    declared = retry is not None
    if max_attempts is not UNSET:
        attempts = check_max_attempts(max_attempts)
        if retry is not None and retry.max_attempts != attempts:
            raise ValueError(
                f"max_attempts={attempts} disagrees with retry=Retry(max_attempts={retry.max_attempts}); "
                "give max_attempts in the Retry only"
            )
        retry = retry or Retry(max_attempts=attempts)
    return Policy(
        retry=retry or Retry(),
        retry_errors=declared,
        timeout=optional_duration(timeout, "timeout"),
        heartbeat_timeout=optional_duration(heartbeat_timeout, "heartbeat_timeout"),
        pending_timeout=optional_duration(pending_timeout, "pending_timeout"),
    )


def with_max_attempts(policy: Policy, max_attempts: int) -> Policy:
    return replace(policy, retry=replace(policy.retry, max_attempts=max_attempts))


# ---------------------------------------------------------------- wire forms (the edges only)


def retry_to_proto(retry: Retry) -> Any:
    from flux.v1 import control_pb2

    return control_pb2.RetryPolicy(
        max_attempts=retry.max_attempts,
        initial_delay_s=float(retry.initial_delay),  # type: ignore[arg-type]
        backoff=retry.backoff,
        max_delay_s=float(retry.max_delay),  # type: ignore[arg-type]
        jitter=retry.jitter,
        retry_on=list(retry.retry_on),
        no_retry_on=list(retry.no_retry_on),
    )


def retry_from_proto(message: Any, field_name: str = "retry") -> Retry:
    """A RetryPolicy as sent; its errors (ValueError/TypeError) name the field."""
    try:
        return Retry(
            max_attempts=message.max_attempts or DEFAULT_MAX_ATTEMPTS,
            initial_delay=message.initial_delay_s,
            backoff=message.backoff or 1.0,
            max_delay=message.max_delay_s or max(300.0, message.initial_delay_s),
            jitter=message.jitter,
            retry_on=tuple(message.retry_on),
            no_retry_on=tuple(message.no_retry_on),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field_name}: {exc}") from None


@functools.lru_cache(maxsize=128)
def default_policy(max_attempts: int) -> Policy:
    """``max_attempts`` alone, made once per count: every execution without a policy asks for it."""
    return Policy(retry=Retry(max_attempts=max_attempts))


@functools.lru_cache(maxsize=128)
def default_policy_proto(max_attempts: int) -> Any:
    """Its proto, made once per count too (assigning it to a field copies it)."""
    return policy_to_proto(default_policy(max_attempts))


def policy_to_proto(policy: Policy) -> Any:
    from flux.v1 import control_pb2

    return control_pb2.ExecutionPolicy(
        retry=retry_to_proto(policy.retry),
        timeout_s=policy.timeout or 0.0,
        heartbeat_timeout_s=policy.heartbeat_timeout or 0.0,
        pending_timeout_s=policy.pending_timeout or 0.0,
        retry_errors=policy.retry_errors,
    )


def policy_from_proto(message: Any, max_attempts: int, field_name: str = "policy") -> Policy:
    """An ExecutionPolicy as sent; unset (older clients) is the default with ``max_attempts``."""
    if not message.HasField("retry"):
        retry = Retry(max_attempts=max_attempts)
    else:
        retry = retry_from_proto(message.retry, f"{field_name}.retry")
    try:
        return Policy(
            retry=retry,
            timeout=optional_duration(message.timeout_s or None, f"{field_name}.timeout_s"),
            heartbeat_timeout=optional_duration(
                message.heartbeat_timeout_s or None, f"{field_name}.heartbeat_timeout_s"
            ),
            pending_timeout=optional_duration(
                message.pending_timeout_s or None, f"{field_name}.pending_timeout_s"
            ),
            retry_errors=message.retry_errors,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None
