"""Schedules: a workflow run on a clock (``flux schedule create nightly --workflow report --cron "0 2 * * *"``).

A schedule is its terms (this dataclass, checked where it is built) and its ticks: the instants its
cron expression (read by cronsim, in the schedule's time zone, so a daylight-saving change moves no
tick off its wall-clock time) or its ``every`` period (multiples of the period since the epoch, so
every replica computes the same ticks) names. Everything here is pure: ``due`` says, from the last
tick handled (the cursor) and the time now, which ticks fire, which were missed beyond the catch-up
window, and where the cursor moves; the ticker in the dispatcher acts on the answer.

A tick's run has an id derived from the schedule and the tick (``execution_id_for``), so a second
firing of the same tick, by a restarted server or another replica, is refused by the store.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from flux.domain.duration import FORM as DURATION_FORM
from flux.domain.duration import MAX_DURATION, seconds_of
from flux.domain.tenant import DEFAULT_TENANT

__all__ = [
    "CATCH_UP_FORM", "CRON_FORM", "DEFAULT_CATCH_UP", "LATE_AFTER", "OVERLAPS", "SCHEDULE_NAME_FORM", "Due", "Schedule",
    "catch_up_text", "due", "execution_id_for", "jitter_of", "manual_id_for", "next_tick", "parse_catch_up",
]  # fmt: skip

SCHEDULE_NAME_FORM = "1-64 characters: letters, digits, '_', '.', '-', starting with a letter or digit"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CRON_FORM = (
    "a cron expression of five fields (minute hour day-of-month month day-of-week), e.g. '*/5 * * * *'"
)
OVERLAPS = ("skip", "allow", "cancel-previous", "queue")
OVERLAP_FORM = "one of skip, allow, cancel-previous, queue"
CATCH_UP_FORM = "a number of ticks (0 or more), 'all' or 'none'"
TIMEZONE_FORM = "an IANA time zone name such as UTC or Europe/Paris"
EVERY_FORM = f"{DURATION_FORM}, whole seconds, at least 1s"
# A tick found later than this after its firing time was missed (the server was down or stalled):
# whether it still runs is the catch-up policy's to say. A tick seen in time always runs.
LATE_AFTER = 5.0
# The most ticks one schedule fires in one step of the ticker ('all' catches up over several steps).
MAX_BATCH = 1000
DEFAULT_CATCH_UP = 1


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule's terms. ``catch_up``: how many missed ticks run after downtime (None: all)."""

    name: str
    workflow: str
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    input_json: str = "null"
    overlap: str = "skip"
    catch_up: int | None = DEFAULT_CATCH_UP
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"name {self.name!r} is invalid; a schedule name is {SCHEDULE_NAME_FORM}")
        if not isinstance(self.workflow, str) or not self.workflow:
            raise ValueError("workflow is required: the name of a registered workflow")
        if (self.cron is None) == (self.every is None):
            raise ValueError(f"give exactly one of cron ({CRON_FORM}) or every ({EVERY_FORM})")
        if self.cron is not None:
            _check_cron(self.cron)
        else:
            object.__setattr__(self, "every", _check_every(self.every))
        object.__setattr__(self, "timezone", _check_timezone(self.timezone))
        if self.overlap not in OVERLAPS:
            raise ValueError(f"overlap must be {OVERLAP_FORM}; got {self.overlap!r}")
        object.__setattr__(self, "catch_up", parse_catch_up(self.catch_up))
        jitter = self.jitter
        if jitter not in (0, 0.0, None, "", "0"):
            jitter = seconds_of(jitter, "jitter", at_most=MAX_DURATION)
        object.__setattr__(self, "jitter", float(jitter or 0.0))
        if not isinstance(self.input_json, str):
            raise TypeError("input must be JSON text")
        try:
            json.loads(self.input_json)
        except ValueError as exc:
            raise ValueError(f"input must be JSON, e.g. '{{\"n\": 1}}': {exc}") from None

    @property
    def spec(self) -> str:
        """How people read it: ``cron */5 * * * * (Europe/Paris)`` or ``every 30s``."""
        if self.cron is not None:
            return f"cron {self.cron}" + ("" if self.timezone == "UTC" else f" ({self.timezone})")
        return f"every {self.every:g}s"

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow, "cron": self.cron, "every": self.every, "timezone": self.timezone,
            "input": self.input_json, "overlap": self.overlap, "catch_up": catch_up_text(self.catch_up),
            "jitter": self.jitter,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], name: str) -> Schedule:
        """As stored (``to_dict``), or as a file of ``flux schedule apply`` gives it (then
        ``every``/``jitter`` may be durations and ``input`` any JSON value; a string is JSON text)."""
        unknown = set(document) - {
            "name", "workflow", "cron", "every", "timezone", "input", "overlap", "catch_up", "jitter"
        }  # fmt: skip
        if unknown:
            raise ValueError(
                f"unknown field {sorted(unknown)[0]!r}; a schedule has workflow, cron or every, timezone, "
                "input, overlap, catch_up, jitter"
            )
        raw_input = document.get("input", "null")
        input_json = raw_input if isinstance(raw_input, str) else json.dumps(raw_input)
        return cls(
            name=name,
            workflow=document.get("workflow", ""),
            cron=document.get("cron") or None,
            every=document.get("every") or None,
            timezone=document.get("timezone") or "UTC",
            input_json=input_json,
            overlap=document.get("overlap") or "skip",
            catch_up=document.get("catch_up", DEFAULT_CATCH_UP),
            jitter=document.get("jitter") or 0.0,
        )

    def evolve(self, **changes: Any) -> Schedule:
        return replace(self, **changes)


def _check_cron(expression: object) -> None:
    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise ValueError(f"cron must be {CRON_FORM}; got {expression!r}")
    try:
        CronSim(expression, datetime(2000, 1, 1))
    except (CronSimError, ValueError) as exc:
        raise ValueError(f"cron must be {CRON_FORM}; got {expression!r} ({exc})") from None


def _check_every(value: object) -> float:
    seconds = seconds_of(value, "every", at_most=MAX_DURATION)
    if seconds < 1 or seconds != int(seconds):
        raise ValueError(f"every must be {EVERY_FORM}; got {value!r}")
    return float(seconds)


def _check_timezone(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"timezone must be {TIMEZONE_FORM}; got {value!r}")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"timezone must be {TIMEZONE_FORM}; got unknown time zone {value!r}") from None
    return value


def parse_catch_up(value: object) -> int | None:
    """'all' → None, 'none' → 0, a count (an int or its digits) → itself."""
    if value is None or value == "all":
        return None
    if value == "none":
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"catch_up must be {CATCH_UP_FORM}; got {value!r}")


def catch_up_text(value: int | None) -> str:
    return "all" if value is None else "none" if value == 0 else str(value)


# ----------------------------------------------------------------------------- ticks


def _forward(schedule: Schedule, after: float) -> Iterator[float]:
    """Ticks strictly after ``after``, oldest first."""
    if schedule.every is not None:
        period = schedule.every
        k = math.floor(after / period) + 1
        while True:
            yield k * period
            k += 1
    assert schedule.cron is not None
    start = datetime.fromtimestamp(after, ZoneInfo(schedule.timezone))
    for moment in CronSim(schedule.cron, start):
        yield moment.timestamp()


def _backward(schedule: Schedule, at: float) -> Iterator[float]:
    """Ticks at or before ``at``, newest first."""
    if schedule.every is not None:
        period = schedule.every
        k = math.floor(at / period)
        while True:
            yield k * period
            k -= 1
    assert schedule.cron is not None
    # cronsim's reverse walk is strictly before its start; ticks are whole minutes.
    start = datetime.fromtimestamp(math.floor(at) + 1, ZoneInfo(schedule.timezone))
    for moment in CronSim(schedule.cron, start, reverse=True):
        yield moment.timestamp()


def jitter_of(schedule: Schedule, tenant: str, tick: float) -> float:
    """The tick's delay, in [0, jitter): the same on every replica and after every restart."""
    if schedule.jitter <= 0:
        return 0.0
    digest = hashlib.sha256(f"{tenant}/{schedule.name}/{tick:.0f}".encode()).digest()
    return schedule.jitter * int.from_bytes(digest[:8], "big") / 2**64


def next_tick(schedule: Schedule, after: float) -> float:
    """The first tick after ``after`` (its firing time adds ``jitter_of``)."""
    return next(_forward(schedule, after))


@dataclass(frozen=True, slots=True)
class Due:
    """What one step of the ticker does for a schedule: fire these ticks (oldest first), count
    ``missed`` ticks (late beyond the catch-up window, never fired), move the cursor to ``cursor``."""

    fire: tuple[float, ...]
    missed: int
    cursor: float


def due(schedule: Schedule, tenant: str, cursor: float, now: float, late_after: float = LATE_AFTER) -> Due:
    """The ticks after ``cursor`` whose firing time (tick + jitter) has come by ``now``.

    Ticks are handled in order: the cursor stops before the first one not yet due, so a later
    tick never overtakes an earlier one. A due tick found more than ``late_after`` seconds late
    was missed; of those, only the newest ``catch_up`` fire (all of them for 'all').
    """
    offset = lambda t: jitter_of(schedule, tenant, t)  # noqa: E731
    late = lambda t: now - (t + offset(t)) > late_after  # noqa: E731
    found: list[float] = []
    skipped_before = 0
    # The newest tick passed over as missed: the cursor moves at least to it.
    passed = cursor
    if schedule.catch_up is None:
        for tick in _forward(schedule, cursor):
            if tick > now or len(found) >= MAX_BATCH:
                break
            found.append(tick)
    else:
        late_seen = 0
        for tick in _backward(schedule, now):
            if tick <= cursor:
                break
            if late(tick):
                if late_seen >= schedule.catch_up or len(found) >= MAX_BATCH:
                    skipped_before = _count_between(schedule, cursor, tick)
                    passed = tick
                    break
                late_seen += 1
            found.append(tick)
        found.reverse()
    fire: list[float] = []
    missed = skipped_before
    moved = passed
    for tick in found:
        if tick + offset(tick) > now:
            break
        fire.append(tick)
        moved = tick
    return Due(tuple(fire), missed, moved)


def _count_between(schedule: Schedule, cursor: float, upto: float, most: int = 100_000) -> int:
    """Ticks in (cursor, upto]: the missed ones a step passes over (counted up to ``most``)."""
    if schedule.every is not None:
        return max(0, math.floor(upto / schedule.every) - math.floor(cursor / schedule.every))
    count = 0
    for tick in _forward(schedule, cursor):
        if tick > upto or count >= most:
            break
        count += 1
    return count


def execution_id_for(tenant: str, name: str, tick: float) -> str:
    """The run of ``name``'s tick: ``sch-<name>-<tick>`` (another tenant's carries a digest of its
    tenant, so two tenants' schedules of one name never share an id)."""
    base = f"sch-{name}-{tick:.0f}"
    if tenant == DEFAULT_TENANT:
        return base
    return f"{base}-{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"


def manual_id_for(tenant: str, name: str, at: float) -> str:
    """A manual tick's run (``flux schedule trigger``): ``sch-<name>-m<milliseconds>``."""
    base = f"sch-{name}-m{round(at * 1000)}"
    if tenant == DEFAULT_TENANT:
        return base
    return f"{base}-{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"
