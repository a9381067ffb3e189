"""Fixtures for every test, unit and integration."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_terminal_size_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-xdist's worker processes run with COLUMNS=80 and LINES=24 set; the CLI's tables narrow to
    # COLUMNS (flux/cli/tables.py), so every CLI a test started there printed an 80-column table where
    # the test expects piped output, whole rows. A test that wants a width sets COLUMNS itself.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
