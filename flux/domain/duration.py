"""Durations as people write them: ``30d``, ``12h``, ``90m``, ``3600s``, ``1h30m``, or plain seconds.

One reader for the CLI's flags (``--since``, ``--expires-in``) and the Python client's
arguments (``expires_in="30d"``), so both accept the same forms and refuse with the same words.
"""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
FORM = "a duration such as 90s, 15m, 2h, 30d or 1h30m (or a number of seconds)"


def seconds_of(value: float | str, field: str) -> float:
    """``value`` in seconds, > 0; ValueError naming ``field`` and the accepted form otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{field} must be {FORM}; got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"{field} must be {FORM}; got {value!r}") from None
            seconds = sum(float(n) * UNIT_SECONDS[u] for n, u in parts)
    else:
        raise ValueError(f"{field} must be {FORM}; got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{field} must be a positive duration; got {value!r}")
    return seconds
