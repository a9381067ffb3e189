"""The fleet bench puts its slowest dispatches down to the loops that paused while they waited
(bench/fleet.py ``_slowest``): a pause counts for a dispatch when it ended between the
submission and the arrival."""

from __future__ import annotations

import json
from pathlib import Path

from bench.fleet import _slowest


def _probe(path: Path, ends: list[float]) -> Path:
    path.write_text(json.dumps({"lags": [[at, 0.004, 0.004] for at in ends], "collections": []}))
    return path


def test_the_slowest_dispatches_are_matched_with_the_pauses_they_waited_across(tmp_path: Path) -> None:
    # 100 dispatches: 98 quick, and two slow ones, arriving at t=10 (waited 8 ms) and t=20 (9 ms).
    latencies = [0.001] * 98 + [0.008, 0.009]
    arrivals = [float(i) for i in range(100, 198)] + [10.0, 20.0]
    report = {
        "latencies": {"unconstrained": latencies[:50], "constrained": latencies[50:]},
        "arrivals": {"unconstrained": arrivals[:50], "constrained": arrivals[50:]},
    }
    fleet = _probe(tmp_path / "fleet.json", [9.995, 50.0])  # ended inside the first one's wait
    server = _probe(tmp_path / "server.json", [19.9, 20.5])  # both ended outside the second's
    result = _slowest(report, {"fleet": fleet, "server": server})
    assert result == {"n": 2, "from_ms": 8.0, "behind_a_fleet_pause": 1, "behind_a_server_pause": 0}
