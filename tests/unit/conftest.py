"""Fixtures shared by the unit tests (tests/unit/harness.py has the harness they start)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.harness import Flux


@pytest.fixture
async def flux() -> AsyncIterator[Flux]:
    """A started dispatcher over a fresh in-memory store, its housekeeping driven by the test."""
    f = await Flux().start()
    yield f
    await f.d.stop()
