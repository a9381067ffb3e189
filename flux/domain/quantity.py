"""Byte quantities as users write them: ``"512Mi"``, ``"8Gi"``, ``"10G"`` or an int.

Binary suffixes (Ki Mi Gi Ti Pi Ei) are powers of 1024 and decimal suffixes
(k M G T P E) powers of 1000, exactly as Kubernetes resource quantities. We do
not accept ``"8GB"`` or ``"8gb"``: they are ambiguous between the two families,
and silently picking one is how a job asks for 7 % less memory than it meant.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation, localcontext

BINARY_SUFFIXES = {
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "Pi": 1024**5,
    "Ei": 1024**6,
}
DECIMAL_SUFFIXES = {"k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4, "P": 1000**5, "E": 1000**6}
_MULTIPLIERS = {"": 1, **BINARY_SUFFIXES, **DECIMAL_SUFFIXES}

# Largest value an int64 proto field carries.
MAX_BYTES = 2**63 - 1

_QUANTITY = re.compile(r"^\s*(?P<number>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*(?P<suffix>[A-Za-z]*)\s*$")

ACCEPTED_FORMS = (
    "an int number of bytes, or a string with a binary suffix Ki Mi Gi Ti Pi Ei (1024^n) "
    "or a decimal suffix k M G T P E (1000^n), e.g. '512Mi', '8Gi', '10G'"
)


def parse_bytes(value: object, field: str) -> int:
    """Return ``value`` as whole bytes, or raise naming ``field`` and the accepted forms.

    Fractions round up (``"1.5Ki"`` is 1536, ``"0.1Ki"`` is 103): a request is
    a floor on what the worker must have, so rounding down would under-ask.
    """
    if isinstance(value, bool):
        raise TypeError(f"{field} must be {ACCEPTED_FORMS}; got bool {value!r}")
    if isinstance(value, int):
        return _check_range(value, field, show_int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{field} must be a finite number of bytes; got {value!r}")
        if not value.is_integer():
            raise ValueError(f"{field} must be a whole number of bytes; got {value!r}")
        return _check_range(int(value), field, repr(value))
    if isinstance(value, str):
        return _parse_string(value, field)
    raise TypeError(f"{field} must be {ACCEPTED_FORMS}; got {type(value).__name__} {value!r}")


def _parse_string(text: str, field: str) -> int:
    if text.strip().startswith("-"):
        raise ValueError(f"{field} must not be negative; got {text!r}")
    match = _QUANTITY.match(text)
    if match is None or match["suffix"] not in _MULTIPLIERS:
        raise ValueError(f"{field}: {text!r} is not a quantity{_hint(text)}; use {ACCEPTED_FORMS}")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # the regex admits only digits, so this is a bug guard
        raise ValueError(f"{field}: {text!r} is not a quantity; use {ACCEPTED_FORMS}") from exc
    with localcontext() as context:
        # The default 28 digits would round "1.00000000000000000000000000001" down to 1;
        # the multiplier has at most 19 digits, so this precision keeps the product exact.
        context.prec = len(match["number"]) + 20
        scaled = (number * _MULTIPLIERS[match["suffix"]]).to_integral_value(rounding=ROUND_CEILING)
    return _check_range(int(scaled), field, repr(text))


def _hint(text: str) -> str:
    """Suggest the intended spelling for the common ``8GB`` / ``8gb`` / ``8Kb`` mistakes."""
    match = re.match(r"^\s*([\d.]+)\s*([kKmMgGtTpPeE])[iI]?[bB]\s*$", text)
    if not match:
        return ""
    number, letter = match.groups()
    decimal = "k" if letter in "kK" else letter.upper()
    return f" (did you mean {number}{letter.upper()}i for 1024^n or {number}{decimal} for 1000^n?)"


def _check_range(value: int, field: str, shown: str) -> int:
    if value < 0:
        raise ValueError(f"{field} must not be negative; got {shown}")
    if value > MAX_BYTES:
        raise ValueError(f"{field} is larger than {MAX_BYTES} bytes (2^63 - 1); got {shown}")
    return value


def show_int(value: int) -> str:
    """``repr`` for ints in messages; Python refuses to print ints over 4300 digits."""
    return repr(value) if value.bit_length() <= 256 else f"an int of {value.bit_length()} bits"


def format_bytes(value: int) -> str:
    """Render bytes for people: ``8589934592`` -> ``8.0 GiB``."""
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if amount < 1024 or unit == "PiB":
            return f"{int(amount)} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")
