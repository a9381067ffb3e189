"""Pages of the worker listing (flux/dispatcher/reads/worker_pages.py): by name, stable tokens, clear refusals."""

from __future__ import annotations

import pytest

from flux.dispatcher.reads.worker_pages import WHOLE_FLEET, worker_page
from flux.errors import InvalidArgument


def _all_pages(names: list[str], size: int) -> list[list[str]]:
    pages, token = [], ""
    while True:
        page, token = worker_page(names, names, size, token)
        pages.append(list(page))
        if not token:
            return pages


@pytest.mark.parametrize("size", [1, 2, 3, 7, 10, 11])
def test_pages_cover_every_worker_once_in_name_order(size: int) -> None:
    names = [f"w{i:02d}" for i in range(10)]
    pages = _all_pages(names, size)
    assert [n for page in pages for n in page] == names
    assert all(len(page) == size for page in pages[:-1]) and 0 < len(pages[-1]) <= size


def test_an_unpaged_call_answers_every_worker_without_a_token() -> None:
    names = [f"w{i}" for i in range(250)]
    page, token = worker_page(names, names, 0, "")
    assert list(page) == names and token == ""


def test_a_token_still_works_after_workers_join_and_leave() -> None:
    names = ["a", "c", "e", "g"]
    first, token = worker_page(names, names, 2, "")
    assert list(first) == ["a", "c"]
    changed = ["a", "b", "d", "e", "g"]  # c left, b and d joined
    second, _ = worker_page(changed, changed, 2, token)
    assert list(second) == ["d", "e"]  # right after "c", whatever joined before it


@pytest.mark.parametrize("size", [-1, WHOLE_FLEET + 1])
def test_a_page_size_out_of_range_is_refused_naming_the_field(size: int) -> None:
    with pytest.raises(InvalidArgument, match=rf"page_size must be between 1 and {WHOLE_FLEET}.*got {size}"):
        worker_page(["a"], ["a"], size, "")


@pytest.mark.parametrize("token", ["%%%", "_w"])  # not base64; not UTF-8 (0xff)
def test_a_token_no_listing_returned_is_refused(token: str) -> None:
    with pytest.raises(InvalidArgument, match="page_token is not one a worker listing returned"):
        worker_page(["a"], ["a"], 1, token)
