"""When the server freezes its heap out of full collections (flux/dispatcher/state/freezing.py). A fake clock; no sleeping."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from flux.dispatcher.state.freezing import STORM, Freezer, unwatch, watch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test session collects as usual


def test_a_connect_storm_is_frozen_once_it_has_been_quiet_for_a_second() -> None:
    clock = Clock()
    freezer = Freezer(clock)
    for _ in range(STORM - 1):
        freezer.connected()
    clock.now += 5
    assert not freezer.tick()  # a few reconnects are no storm
    freezer.connected()
    assert not freezer.tick()  # the storm may still be going
    clock.now += 1.0
    assert freezer.tick()
    assert gc.get_freeze_count() > 0
    assert not freezer.tick()  # once per storm


def test_the_survivors_of_a_full_collection_are_frozen_at_the_next_tick() -> None:
    freezer = Freezer(Clock())
    freezer.collected("stop", {"generation": 1, "collected": 0, "uncollectable": 0})
    assert not freezer.tick()
    freezer.collected("start", {"generation": 2, "collected": 0, "uncollectable": 0})
    assert not freezer.tick()
    freezer.collected("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    assert freezer.tick()
    assert not freezer.tick()


def test_watching_hears_a_real_full_collection() -> None:
    freezer = Freezer(Clock())
    watch(freezer)
    try:
        gc.collect()
    finally:
        unwatch(freezer)
    assert freezer.collected not in gc.callbacks
    assert freezer.tick()
