"""The short chaos run: a fixed seed, about 60 s of faults on SQLite, workers on both transports.

``make chaos`` runs the same harness for 10 minutes (bench/chaos); here the
result document must show no violation and a fault of every SQLite kind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chaos import faults, run

pytestmark = pytest.mark.integration

SEED = 1717
SECONDS = 60


@pytest.mark.timeout(SECONDS + 400)  # faults, then the bounded drain, probes and the checks
def test_a_short_seeded_chaos_run_on_sqlite_loses_nothing(tmp_path: Path) -> None:
    document = run(SECONDS, SEED, "sqlite", tmp_path, workers=4)
    summary = {key: value for key, value in document.items() if key != "trail"}
    assert document["violations"] == [], json.dumps(document, indent=1)[:20000]
    assert (document["lost"], document["duplicates"], document["overcommit"]) == (0, 0, 0), summary
    assert document["cancelled_completed"] == 0 and document["drained"], summary
    # Two tenants shared the load, and their quotas were sampled the whole run (none exceeded).
    assert document["quota"] == 0, summary
    tenants = document["tenants"]
    assert set(tenants["accepted"]) == {"alpha", "beta"} and tenants["samples"] > 0, summary
    assert max(tenants["peak_cores"].values()) >= 1, summary
    assert document["workers"]["transports"] == ["grpc", "sse"]
    # The checks had something to check: the sampler saw bodies running on both sides, and the
    # servers' JSON lifecycle lines were read.
    peaks = document["sample_peaks"]
    assert peaks["markers_executions"] >= 1 and peaks["server_executions"] >= 1, summary
    assert document["lifecycle_lines"] > document["executions"]["accepted"], summary
    assert set(document["faults"]) == set(faults.SQLITE_KINDS)
    assert all(count >= 1 for count in document["faults"].values()), summary
    # The load's every shape was accepted and decided; the never-fits one waits, explained.
    by_state = document["executions"]["by_final_state"]
    assert by_state.get("COMPLETED", 0) > 0 and by_state.get("FAILED", 0) > 0, summary
    assert by_state.get("CANCELLED", 0) >= document["executions"]["cancel_answered_cancelled"] > 0, summary
    assert by_state.get("CREATED", 0) == document["executions"]["by_shape"].get("never_fits", 0), summary
    # Keyed and rated work ran under the faults, and the flow invariants had samples and starts to check.
    flow = document["flow"]
    assert flow["violations"] == 0 and flow["key_samples"] > 0 and flow["key_peak"] >= 1, summary
    assert flow["paced_starts"] >= 8, summary
    # A schedule ticked every second through the faults: each tick ran once, none was skipped
    # (catch-up all), every run stored under its tick's id.
    schedule = document["schedule"]
    assert schedule["violations"] == 0 and schedule["ticks"] >= SECONDS // 2, summary
    assert schedule["stored"] == schedule["ticks"], summary
    # Bodies that sleep past their timeout were submitted: "every timeout fires" was checked on them.
    assert document["executions"]["by_shape"].get("times_out", 0) >= 1, summary
    # Dependents were submitted under the faults, and none started before its dependency completed.
    assert document["dependencies"]["dependents"] >= 1 and document["dependencies"]["violations"] == 0, (
        summary
    )
