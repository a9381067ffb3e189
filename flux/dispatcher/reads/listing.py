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
from flux.store import ExecutionQuery

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
_UNFINISHED = frozenset(int(s) for s in State if not s.finished)


def opaque_token(position: str) -> str:
    """A page token: the position of a page's last item, in base64 safe in a URL as is."""
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def token_position(token: str, listing: str = "listing") -> str:
    """The position an ``opaque_token`` holds; anything else is refused, naming the field."""
    try:
        position = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (ValueError, UnicodeDecodeError, binascii.Error):
        position = ""
    if not position:
        raise _not_a_token(listing)
    return position


def _not_a_token(listing: str) -> InvalidArgument:
    return InvalidArgument(
        f"page_token is not one a {listing} returned; pass next_page_token unchanged, or leave it empty"
    )


def page_token(seq: int, execution_id: str) -> str:
    return opaque_token(f"{seq}:{execution_id}")


def parse_page_token(token: str) -> tuple[int, str]:
    seq, _, execution_id = token_position(token).partition(":")
    if not (seq.isdigit() and execution_id):
        raise _not_a_token("listing")
    return int(seq), execution_id


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
