"""Pages of the worker listing, by name. Pure: no protobuf.

A page token is the name of the last worker a page returned (names are unique
and the listing is sorted by name), so a token stays valid while workers come
and go: the next page starts right after that name, whatever joined since.
An unpaged call (page size 0) gets every worker up to ``WHOLE_FLEET``, which
is today's answer for any fleet within the default --max-workers.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import TypeVar

from flux import defaults
from flux.dispatcher.reads.listing import opaque_token, token_position
from flux.errors import InvalidArgument

WHOLE_FLEET = defaults.MAX_WORKERS
# What `flux workers list` and FluxClient.workers() ask for per call.
CLIENT_PAGE = 1000

Named = TypeVar("Named")


def worker_page_token(name: str) -> str:
    return opaque_token(name)


def _after(token: str) -> str:
    return token_position(token, "worker listing")


def worker_page(
    workers: Sequence[Named], names: Sequence[str], page_size: int, page_token: str
) -> tuple[Sequence[Named], str]:
    """The page of ``workers`` (sorted by name; ``names`` theirs) and the next page's token ("" at the end)."""
    if not 0 <= page_size <= WHOLE_FLEET:
        raise InvalidArgument(
            f"page_size must be between 1 and {WHOLE_FLEET} workers (0 means up to {WHOLE_FLEET}); got {page_size}"
        )
    start = bisect_right(names, _after(page_token)) if page_token else 0
    end = start + (page_size or WHOLE_FLEET)
    page = workers[start:end]
    return page, worker_page_token(names[end - 1]) if end < len(workers) else ""
