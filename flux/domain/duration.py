"""Durations as people write them: ``500ms``, ``90s``, ``15m``, ``2h``, ``30d``, ``1h30m``, or plain seconds.

The one reader for every duration Flux is given: the CLI's flags (``--since``, ``--expires-in``,
``--attempt-timeout``, ``--infeasible-after``), the Python client's arguments (``expires_in="30d"``,
``attempt_timeout="5m"``) and the execution policies (``timeout="10m"``, ``Retry(initial_delay="1s")``,
flux/domain/policy.py), so all of them accept the same forms and refuse with the same words,
naming the field they were given for.
"""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
FORM = "a duration such as 500ms, 90s, 15m, 2h, 30d or 1h30m (or a number of seconds)"
# A year: far beyond any sane timeout, and small enough for every clock and store column.
MAX_DURATION = 366 * 86400.0


def seconds_of(value: object, field: str, *, at_most: float | None = None) -> float:
    """``value`` in seconds, > 0 (and <= ``at_most`` when given).

    TypeError for what is neither a number nor a string, ValueError for a string or number that
    is not a positive duration; both name ``field`` and the accepted form.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"{field} must be {FORM}; got {type(value).__name__} {value!r}")
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"{field} must be {FORM}; got {value!r}") from None
            seconds = sum(float(n) * UNIT_SECONDS[u] for n, u in parts)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{field} must be {FORM}, more than zero; got {value!r}")
    if at_most is not None and seconds > at_most:
        most = "a year" if at_most == MAX_DURATION else f"{at_most:g} seconds"
        raise ValueError(f"{field} must be {FORM}, at most {most}; got {value!r}")
    return seconds
