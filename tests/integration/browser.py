"""A headless chromium for tests that drive pages: the system's browser, through Playwright.

Playwright's own browser downloads are never used (no ``playwright install``):
the tests run the distribution's chromium. Where it is missing the tests skip
with the reason, except under CI (env ``CI`` set), where a missing browser is
a failure: CI must not go green by skipping them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from flux.testing_browser import CHROMIUM_ARGS, chromium_path

ARTIFACTS = Path(os.environ.get("FLUX_TEST_ARTIFACTS", Path(__file__).parents[2] / "artifacts"))


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    path = chromium_path()
    if path is None:
        _unavailable("no chromium at /usr/bin/chromium (or FLUX_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


def screenshot(page: object, name: str) -> Path:
    """Save the page as artifacts/NAME.png and print where, so CI can keep it."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    print(f"screenshot: {path}")
    return path
