"""Fixtures shared by the unit tests (tests/unit/harness.py has the harness they start)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from flux.dispatcher.modes.shared.replica import shared
from tests.unit.harness import Flux
from tests.unit.shared_memory_store import SharedMemoryStore


@pytest.fixture
async def flux() -> AsyncIterator[Flux]:
    """A started dispatcher over a fresh in-memory store, its housekeeping driven by the test."""
    f = await Flux().start()
    yield f
    await f.d.stop()


@pytest.fixture
async def replica() -> AsyncIterator[Flux]:
    """A started dispatcher in the replicas' shared mode, over an in-memory shared store."""
    store = SharedMemoryStore()
    f = await Flux(store, modes=shared(store)).start()
    yield f
    await f.d.stop()
