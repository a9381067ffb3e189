"""``@workflow`` and ``@workflow.with_options``: declare a workflow and what it needs.

The decorator validates everything at declaration and attaches a frozen
:class:`WorkflowDefinition` to the function as ``__flux_workflow__``. The
function itself is returned unchanged, so ``await fn(ctx)`` still works in a
unit test and pickling or introspection see the real function.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from flux.domain.gang import Gang
from flux.domain.labels import validate_labels
from flux.domain.limits import Concurrency, Flow, RateLimit, flow_of
from flux.domain.placement import validate_placement
from flux.domain.policy import DEFAULT_MAX_ATTEMPTS, UNSET, Policy, Retry, default_policy, policy_of

__all__ = ["DEFAULT_MAX_ATTEMPTS", "WorkflowDefinition", "definition_of", "workflow"]
from flux.domain.resource_request import ResourceRequest

F = TypeVar("F", bound=Callable[..., Any])

ATTRIBUTE = "__flux_workflow__"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")  # fullmatch only
# Bounded so a priority stays a small, comparable number on every wire and in every store.
MIN_PRIORITY, MAX_PRIORITY = -1000, 1000
NAME_FORM = "1-128 characters: letters, digits, '_', '.', '-', starting with a letter or '_'"


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    name: str
    entrypoint: str
    requests: ResourceRequest = field(default_factory=ResourceRequest)
    affinity: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    is_async: bool = True
    # Higher runs first among executions competing for the same worker; overridable per run.
    priority: int = 0
    # Timeouts and retries (flux.domain.policy), its retry.max_attempts equal to max_attempts; None
    # when only max_attempts was given (so a plain declaration reads and compares as before).
    policy: Policy | None = None
    # Concurrency per key, a rate limit, named limits (flux.domain.limits); empty: none.
    flow: Flow = field(default_factory=Flow)
    # Several workers at once, all or none (flux.domain.gang); None: one worker.
    gang: Gang | None = None
    # "spread" or "binpack" (which capable worker it goes to); "": the server's --placement.
    placement: str = ""

    @property
    def effective_policy(self) -> Policy:
        return self.policy if self.policy is not None else default_policy(self.max_attempts)


def definition_of(fn: object) -> WorkflowDefinition | None:
    """The definition ``@workflow`` attached to ``fn``, or None for plain functions."""
    found = getattr(fn, ATTRIBUTE, None)
    return found if isinstance(found, WorkflowDefinition) else None


def validate_name(name: object, field_name: str = "name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{field_name} {name!r} is invalid; a workflow name is {NAME_FORM}")
    return name


def validate_priority(value: object, field_name: str = "priority") -> int:
    """An int in [MIN_PRIORITY, MAX_PRIORITY]; the error names the field and the accepted form."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{field_name} must be an int between {MIN_PRIORITY} and {MAX_PRIORITY} (higher runs first); "
            f"got {type(value).__name__} {value!r}"
        )
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(
            f"{field_name} must be between {MIN_PRIORITY} and {MAX_PRIORITY} (higher runs first); got {value}"
        )
    return value


class _WorkflowDecorator:
    """``workflow`` is this object: callable bare, with ``with_options`` for settings."""

    def __call__(self, fn: F) -> F:
        return self.with_options()(fn)

    def with_options(
        self,
        name: str | None = None,
        requests: ResourceRequest | None = None,
        affinity: Mapping[str, str] | None = None,
        max_attempts: int = UNSET,
        priority: int = 0,
        timeout: float | str | None = None,
        retry: Retry | None = None,
        heartbeat_timeout: float | str | None = None,
        pending_timeout: float | str | None = None,
        concurrency: Concurrency | None = None,
        rate_limit: RateLimit | None = None,
        limits: list[str] | None = None,
        gang: Gang | None = None,
        placement: str | None = None,
    ) -> Callable[[F], F]:
        """``timeout``: one attempt, from its start to its result; ``retry``: how failed attempts
        are tried again (``max_attempts`` alone is ``Retry(max_attempts=N)``); ``heartbeat_timeout``:
        an attempt silent (no ``ctx.heartbeat()``) longer is lost; ``pending_timeout``: an execution
        not started within it fails. Durations: seconds or ``"30s"``, ``"10m"``, ``"1h"``.
        ``concurrency``, ``rate_limit``, ``limits``: flow control (flux.domain.limits).
        ``gang``: ``Gang(size, same=, spread=)``, one execution on ``size`` workers at once, all or
        none; ``requests`` are then each member's. ``placement``: ``"spread"`` (the least loaded
        capable worker) or ``"binpack"`` (the fullest that fits); unset, the server's ``--placement``."""
        # Validate before seeing the function, so the error points at the options line.
        if name is not None:
            validate_name(name)
        if requests is not None and not isinstance(requests, ResourceRequest):
            raise TypeError(
                "requests must be a ResourceRequest, e.g. ResourceRequest(cpu=4, memory='8Gi'); "
                f"got {type(requests).__name__}"
            )
        labels = MappingProxyType(validate_labels(affinity, "affinity"))
        policy = policy_of(max_attempts, retry, timeout, heartbeat_timeout, pending_timeout)
        rank = validate_priority(priority)
        flow = flow_of(concurrency, rate_limit, limits)
        if gang is not None and not isinstance(gang, Gang):
            raise TypeError(f"gang must be a Gang, e.g. Gang(size=4, same='rack'); got {type(gang).__name__}")
        policy_name = "" if placement is None else validate_placement(placement)

        def decorate(fn: F) -> F:
            if not callable(fn):
                raise TypeError(f"@workflow decorates a function; got {type(fn).__name__}")
            definition = WorkflowDefinition(
                name=name or validate_name(fn.__name__, "function name"),
                entrypoint=fn.__name__,
                requests=requests or ResourceRequest(),
                affinity=labels,
                max_attempts=policy.max_attempts,
                is_async=inspect.iscoroutinefunction(fn),
                priority=rank,
                policy=None if policy.is_default() else policy,
                flow=flow,
                gang=gang,
                placement=policy_name,
            )
            setattr(fn, ATTRIBUTE, definition)
            return fn

        return decorate


workflow = _WorkflowDecorator()
