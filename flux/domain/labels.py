"""Worker labels and workflow affinity: ``role=training``, ``zone=eu-west-1a``.

Keys and values follow the Kubernetes label syntax, so labels copied from a
node selector mean the same thing here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Key: optional DNS-subdomain prefix and "/", then a name of 1-63 characters.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
# Both checked with fullmatch ("$" would let a trailing newline through).
_KEY = re.compile(rf"(?:[a-z0-9](?:[a-z0-9.-]{{0,251}}[a-z0-9])?/)?{_NAME}")
_VALUE = re.compile(rf"(?:{_NAME})?")
MAX_LABELS = 64

KEY_FORM = (
    "1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric, with an optional 'prefix/'"
)
VALUE_FORM = "empty or 1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"


def validate_labels(labels: object, field: str) -> dict[str, str]:
    """Return ``labels`` as a plain dict of str to str, or raise naming ``field``."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise TypeError(
            f"{field} must be a dict of label key to value, e.g. {{'role': 'training'}}; got {type(labels).__name__}"
        )
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{field} has {len(labels)} labels; at most {MAX_LABELS} are allowed")
    result: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"{field} key {key!r} is invalid; a key is {KEY_FORM}")
        if not isinstance(value, str) or not _VALUE.fullmatch(value):
            raise ValueError(f"{field}[{key!r}] value {value!r} is invalid; a value is {VALUE_FORM}")
        result[key] = value
    return result


def parse_label_argument(text: str) -> tuple[str, str]:
    """Parse a CLI ``--label k=v`` into a validated pair."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"--label {text!r} must be KEY=VALUE, e.g. role=training")
    validate_labels({key: value}, "--label")
    return key, value
