"""How the CLI reads its typed flags: each parser names the flag and the accepted form in its error."""

from __future__ import annotations

import argparse

from flux.domain.duration import seconds_of
from flux.domain.execution import State
from flux.domain.labels import parse_label_argument
from flux.domain.quantity import parse_bytes

# By name, the wire's values (flux.v1.ExecutionState equals State): read from the domain, so the
# parser loads no protobuf module a worker process would not load otherwise (2 MB each).
EXECUTION_STATES = {state.name: int(state) for state in State}


def execution_id_list(text: str) -> list[str]:
    """``--after ID[,ID...]``: execution ids, comma-separated (spaces around them ignored)."""
    ids = [part.strip() for part in text.split(",")]
    if not all(ids):
        raise argparse.ArgumentTypeError(f"--after takes execution ids separated by commas; got {text!r}")
    return ids


def whole_number(flag: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a whole number; got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{flag} must be >= 0; got {value}")
        return value

    return parse


def prefetch_count(text: str) -> int:
    """``--prefetch N``: 0 (none) up to ``defaults.MAX_PREFETCH``."""
    from flux import defaults

    value = whole_number("--prefetch")(text)
    if value > defaults.MAX_PREFETCH:
        raise argparse.ArgumentTypeError(
            f"--prefetch must be between 0 and {defaults.MAX_PREFETCH}; got {value}"
        )
    return value


def count(flag: str):  # type: ignore[no-untyped-def]
    whole = whole_number(flag)

    def parse(text: str) -> int:
        value = whole(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be >= 1; got {value}")
        return value

    return parse


def quantity(flag: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        try:
            return parse_bytes(int(text) if text.isdigit() else text, flag)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def origin(text: str) -> str:
    from gateway import cors_origin as browser_origin

    try:
        return browser_origin(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def label(text: str) -> tuple[str, str]:
    try:
        return parse_label_argument(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds(flag: str, zero_turns_off: bool = False):  # type: ignore[no-untyped-def]
    """A finite number of seconds, > 0; or >= 0 where 0 turns the feature off."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number of seconds; got {text!r}") from None
        if zero_turns_off and not 0 <= value < float("inf"):
            raise argparse.ArgumentTypeError(f"{flag} must be >= 0 seconds (0 turns it off); got {text}")
        if not zero_turns_off and not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{flag} must be > 0 seconds; got {text}")
        return value

    return parse


def priority(text: str) -> int:
    from flux.workflow import MAX_PRIORITY, MIN_PRIORITY, validate_priority

    try:
        return validate_priority(int(text), "--priority")
    except ValueError as exc:
        if not text.lstrip("+-").isdigit():
            raise argparse.ArgumentTypeError(
                f"--priority must be a whole number between {MIN_PRIORITY} and {MAX_PRIORITY}; got {text!r}"
            ) from None
        raise argparse.ArgumentTypeError(str(exc)) from None


def execution_state(text: str) -> int:
    name = text.strip().upper().removeprefix("EXECUTION_STATE_")
    if name not in EXECUTION_STATES:
        raise argparse.ArgumentTypeError(
            f"--state must be one of {', '.join(EXECUTION_STATES)} (any case); got {text!r}"
        )
    return EXECUTION_STATES[name]


def duration(flag: str):  # type: ignore[no-untyped-def]
    """``90s``, ``15m``, ``2h``, ``30d``, ``1h30m``, or plain seconds -> seconds (flux.domain.duration)."""

    def parse(text: str) -> float:
        try:
            return seconds_of(text, flag)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


parse_duration = duration("--since")


def attempt_duration(text: str) -> float:
    """``--attempt-timeout``: a duration as a declaration takes it (flux.domain.policy)."""
    from flux.domain.policy import parse_duration as policy_duration

    try:
        return policy_duration(text, "--attempt-timeout")
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def max_concurrent(text: str) -> int:
    """``--max-concurrent N``: an int from 1 to 1,000,000 (flux.domain.batch)."""
    from flux.domain.batch import check_max_concurrent

    try:
        return check_max_concurrent(int(text), "--max-concurrent")
    except ValueError as exc:
        if "invalid literal" in str(exc):
            raise argparse.ArgumentTypeError(
                f"--max-concurrent must be an int between 1 and 1,000,000; got {text!r}"
            ) from None
        raise argparse.ArgumentTypeError(str(exc)) from None
