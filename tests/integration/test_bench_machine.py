"""The bench's description of the box: the loopback round trip to a second process
(bench/common.py ``round_trip_us``), measured over real loopback TCP, and its echo process gone after."""

from __future__ import annotations

import math

import psutil
import pytest

from bench.common import machine, round_trip_us

pytestmark = pytest.mark.integration


def test_the_round_trip_is_a_median_of_real_trips_and_leaves_no_process_behind() -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    trip = round_trip_us(200)
    assert math.isfinite(trip) and 0 < trip < 1_000_000
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    described = machine()
    assert described["loopback_round_trip_us"] > 0  # type: ignore[operator]
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
