"""Screenshots of pages under test, kept as artifacts (the ``browser`` fixture is in conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

ARTIFACTS = Path(os.environ.get("FLUX_TEST_ARTIFACTS", Path(__file__).parents[2] / "artifacts"))


def screenshot(page: object, name: str) -> Path:
    """Save the page as artifacts/NAME.png and print where, so CI can keep it."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    print(f"screenshot: {path}")
    return path
