"""Schedules' terms and tick arithmetic (flux/domain/schedule.py), pure: which ticks fire, which
are missed beyond the catch-up window, where the cursor moves, and how bad terms are refused."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from flux.domain.schedule import (
    LATE_AFTER,
    Schedule,
    due,
    execution_id_for,
    jitter_of,
    manual_id_for,
    next_tick,
)

EVERY_10 = Schedule("s", "wf", every="10s", catch_up=1)


@pytest.mark.parametrize(
    ("catch_up", "cursor", "now", "fire", "missed", "cursor_after"),
    [
        pytest.param(1, 100.0, 105.0, (), 0, 100.0, id="nothing due yet"),
        pytest.param(1, 100.0, 110.0, (110.0,), 0, 110.0, id="a tick exactly on time"),
        pytest.param(1, 100.0, 113.0, (110.0,), 0, 110.0, id="a tick a little late still fires"),
        pytest.param(1, 100.0, 125.0, (110.0, 120.0), 0, 120.0, id="two ticks within the late window"),
        pytest.param(
            1, 100.0, 1000.0, (990.0, 1000.0), 88, 1000.0, id="downtime: the newest missed and the current"
        ),
        pytest.param(0, 100.0, 1000.0, (1000.0,), 89, 1000.0, id="catch-up none: only the current tick"),
        pytest.param(0, 100.0, 1004.0, (1000.0,), 89, 1000.0, id="catch-up none, current a bit late"),
        pytest.param(0, 100.0, 1009.0, (), 90, 1000.0, id="catch-up none, nothing current"),
        pytest.param(3, 100.0, 1000.0, (970.0, 980.0, 990.0, 1000.0), 86, 1000.0, id="catch-up 3"),
        pytest.param(
            None, 100.0, 200.0, tuple(float(t) for t in range(110, 201, 10)), 0, 200.0, id="catch-up all"
        ),
    ],
)
def test_due_ticks_by_catch_up(catch_up, cursor, now, fire, missed, cursor_after) -> None:
    schedule = EVERY_10.evolve(catch_up=catch_up)
    plan = due(schedule, "default", cursor, now)
    assert plan.fire == fire
    assert plan.missed == missed
    assert plan.cursor == cursor_after


def test_a_cursor_never_moves_past_an_unfired_tick_and_never_refires() -> None:
    schedule = EVERY_10.evolve(catch_up=None)
    cursor, seen = 0.0, []
    for now in range(0, 200, 3):
        plan = due(schedule, "t", cursor, float(now))
        seen += plan.fire
        cursor = plan.cursor
    assert seen == [float(t) for t in range(10, 200, 10)]


def test_jitter_delays_each_firing_deterministically_and_keeps_order() -> None:
    schedule = Schedule("j", "wf", every="60s", jitter="30s")
    offsets = [jitter_of(schedule, "default", t) for t in range(0, 6000, 60)]
    assert all(0 <= o < 30 for o in offsets) and len(set(offsets)) > 50
    assert offsets == [jitter_of(schedule, "default", t) for t in range(0, 6000, 60)]
    assert jitter_of(schedule, "other", 60) != jitter_of(schedule, "default", 60)
    tick, offset = 120.0, jitter_of(schedule, "default", 120.0)
    assert due(schedule, "default", 60.0, tick + offset - 0.01).fire == ()
    assert due(schedule, "default", 60.0, tick + offset).fire == (tick,)


def test_cron_ticks_follow_the_wall_clock_of_their_time_zone_across_daylight_saving() -> None:
    paris = ZoneInfo("Europe/Paris")
    schedule = Schedule("n", "wf", cron="0 2 * * *", timezone="Europe/Paris")
    winter = next_tick(schedule, datetime(2026, 1, 10, 12, tzinfo=paris).timestamp())
    summer = next_tick(schedule, datetime(2026, 7, 10, 12, tzinfo=paris).timestamp())
    for tick in (winter, summer):
        local = datetime.fromtimestamp(tick, paris)
        assert (local.hour, local.minute) == (2, 0)
    assert datetime.fromtimestamp(winter, ZoneInfo("UTC")).hour == 1
    assert datetime.fromtimestamp(summer, ZoneInfo("UTC")).hour == 0


def test_cron_catch_up_walks_back_from_now() -> None:
    schedule = Schedule("c", "wf", cron="*/5 * * * *", catch_up=2)
    start = datetime(2026, 3, 1, 0, 0, tzinfo=ZoneInfo("UTC")).timestamp()
    plan = due(schedule, "default", start, start + 3600 + 1)
    assert plan.fire == (start + 3000, start + 3300, start + 3600)
    assert plan.missed == 9


def test_ids_are_derived_from_the_schedule_and_the_tick() -> None:
    assert execution_id_for("default", "nightly", 1767225600.0) == "sch-nightly-1767225600"
    other = execution_id_for("ml", "nightly", 1767225600.0)
    assert other.startswith("sch-nightly-1767225600-") and other != execution_id_for(
        "web", "nightly", 1767225600.0
    )
    assert manual_id_for("default", "nightly", 12.3456) == "sch-nightly-m12346"


@pytest.mark.parametrize(
    ("terms", "message"),
    [
        pytest.param(
            {"cron": "*/5 * * *"}, "cron must be a cron expression of five fields", id="four fields"
        ),
        pytest.param({"cron": "61 * * * *"}, "cron must be a cron expression of five fields", id="minute 61"),
        pytest.param({"every": "1m", "cron": "* * * * *"}, "give exactly one of cron", id="both"),
        pytest.param({}, "give exactly one of cron", id="neither"),
        pytest.param({"every": "soon"}, "every must be a duration", id="bad duration"),
        pytest.param({"every": "500ms"}, "every must be .* at least 1s", id="under a second"),
        pytest.param({"every": "1.5s"}, "whole seconds", id="fractional"),
        pytest.param(
            {"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'", id="zone"
        ),
        pytest.param(
            {"every": "1s", "overlap": "sometimes"}, "overlap must be one of skip, allow", id="overlap"
        ),
        pytest.param(
            {"every": "1s", "catch_up": -1}, "catch_up must be a number of ticks", id="negative catch-up"
        ),
        pytest.param({"every": "1s", "jitter": "lots"}, "jitter must be a duration", id="jitter"),
        pytest.param({"every": "1s", "input_json": "{nope"}, "input must be JSON", id="input"),
    ],
)
def test_bad_terms_are_refused_naming_the_field(terms, message) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        Schedule("s", "wf", **terms)


def test_terms_round_trip_through_their_stored_form() -> None:
    schedule = Schedule("s", "wf", cron="0 * * * *", timezone="Asia/Tokyo", input_json='{"a": 1}',
                        overlap="queue", catch_up=None, jitter="5s")  # fmt: skip
    assert Schedule.from_dict(schedule.to_dict(), "s") == schedule
    assert Schedule.from_dict({"workflow": "wf", "every": "1m", "catch_up": "none"}, "p").catch_up == 0
    with pytest.raises(ValueError, match="unknown field 'cronn'"):
        Schedule.from_dict({"workflow": "wf", "cronn": "* * * * *"}, "x")
    assert LATE_AFTER > 0
