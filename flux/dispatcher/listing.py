"""Listing requests checked and turned into store queries; page tokens. Pure: no store, no protobuf.

A page token is the position of the last execution a page returned,
(seq, execution_id), the listing's sort key. Rows are never reordered (seq
and id never change), so a token stays valid while executions are added or
change state: the next page starts right after it, whatever happened since.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from flux.domain.execution import State
from flux.errors import InvalidArgument
from flux.store.base import ExecutionQuery

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
STATE_NAMES = tuple(state.name for state in State)
_UNFINISHED = frozenset(int(s) for s in State if not s.finished)


def parse_state(text: str, field: str = "state") -> State:
    """``"running"``, ``"RUNNING"`` or ``"EXECUTION_STATE_RUNNING"`` -> ``State.RUNNING``."""
    name = text.strip().upper().removeprefix("EXECUTION_STATE_")
    try:
        return State[name]
    except KeyError:
        raise InvalidArgument(
            f"{field} {text!r} is not a state; use one of {', '.join(STATE_NAMES)}"
        ) from None


def page_token(seq: int, execution_id: str) -> str:
    return base64.urlsafe_b64encode(f"{seq}:{execution_id}".encode()).decode().rstrip("=")


def parse_page_token(token: str) -> tuple[int, str]:
    try:
        seq, execution_id = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split(":", 1)
        position = int(seq), execution_id
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidArgument(
            "page_token is not one a listing returned; pass next_page_token unchanged, or leave it empty"
        ) from None
    if not execution_id:
        raise InvalidArgument("page_token is not one a listing returned; pass next_page_token unchanged")
    return position


def execution_query(
    states: Iterable[int],
    workflow: str = "",
    worker: str = "",
    created_after_ms: int = 0,
    page_size: int = 0,
    token: str = "",
) -> ExecutionQuery:
    """A checked ``ExecutionQuery``; every refusal names its field and the accepted form."""
    wanted: list[int] = []
    for position, value in enumerate(states):
        if value not in State._value2member_map_:
            raise InvalidArgument(
                f"states[{position}] is {value}, not a state; use one of "
                + ", ".join(f"{s.name} ({int(s)})" for s in State)
            )
        wanted.append(int(value))
    if not 0 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidArgument(
            f"page_size must be between 1 and {MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE}); got {page_size}"
        )
    if created_after_ms < 0:
        raise InvalidArgument(f"created_after_ms must be >= 0 (0 means no bound); got {created_after_ms}")
    for field, text in (("workflow", workflow), ("worker", worker)):
        if len(text) > 256:
            raise InvalidArgument(f"{field} is longer than 256 characters")
    return ExecutionQuery(
        limit=page_size or DEFAULT_PAGE_SIZE,
        states=tuple(sorted(set(wanted))),
        workflow=workflow,
        worker=worker,
        created_after=created_after_ms / 1000,
        after=parse_page_token(token) if token else None,
    )


def needs_live_state(query: ExecutionQuery) -> bool:
    """Whether rows may match by state or worker in memory but not yet in the store.

    A dispatch is not written until claimed, and a claim or requeue is written a
    moment after it happens; finished states are written before anyone sees them.
    """
    return bool(query.worker) or any(state in _UNFINISHED for state in query.states)
