"""The bench's description of the box: the loopback round trip to a second process
(bench/common.py ``round_trip_us``), measured over real loopback TCP, and its echo process gone after,
also when that process dies before connecting or in the middle of the trips."""

from __future__ import annotations

import math

import psutil
import pytest

from bench import common
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


@pytest.mark.parametrize(
    ("echo", "said"),
    [
        ("raise SystemExit(3)", "exited \\(3\\) before it connected"),
        # Connects, answers five bytes, then goes away in the middle of the measurement.
        (
            "import socket, sys\n"
            "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
            "for _ in range(5):\n    s.sendall(s.recv(1))\n",
            "the echo process went away",
        ),
    ],
)
def test_an_echo_that_dies_fails_the_measurement_at_once(
    echo: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "_ECHO", echo)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match=said):
        round_trip_us(200)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
