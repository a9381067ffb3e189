"""One grammar for every duration: the CLI's flags, the client's arguments and the policies."""

from __future__ import annotations

import pytest

from flux.domain.duration import seconds_of
from flux.domain.policy import Retry, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("90s", 90.0, id="seconds"),
        pytest.param("15m", 900.0, id="minutes"),
        pytest.param("2h", 7200.0, id="hours"),
        pytest.param("30d", 2_592_000.0, id="days"),
        pytest.param("1h30m", 5400.0, id="compound"),
        pytest.param(" 2.5 ", 2.5, id="plain seconds"),
        pytest.param(3, 3.0, id="a number"),
    ],
)
def test_both_readers_take_one_grammar(text: object, seconds: float) -> None:
    assert seconds_of(text, "--since") == seconds
    assert parse_duration(text, "timeout") == seconds


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param("2y", ValueError, id="unknown unit"),
        pytest.param("1h 30m", ValueError, id="inner space"),
        pytest.param("0s", ValueError, id="zero"),
        pytest.param(-1, ValueError, id="negative"),
        pytest.param(float("inf"), ValueError, id="infinite"),
        pytest.param(True, TypeError, id="a bool"),
        pytest.param([1], TypeError, id="a list"),
    ],
)
def test_refusals_name_the_field(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="^--expires-in must be a duration such as 500ms"):
        seconds_of(value, "--expires-in")


def test_policies_stop_at_a_year() -> None:
    assert seconds_of("400d", "--since") == 400 * 86400.0
    with pytest.raises(ValueError, match="timeout must be .* at most a year"):
        parse_duration("400d", "timeout")
    with pytest.raises(ValueError, match="Retry.initial_delay"):
        Retry(initial_delay="soon")
