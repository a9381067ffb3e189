"""Byte quantities: Kubernetes suffixes, int bytes, and refusal of everything else."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux.domain.quantity import (
    BINARY_SUFFIXES,
    DECIMAL_SUFFIXES,
    MAX_BYTES,
    format_bytes,
    parse_bytes,
)

ALL_SUFFIXES = {"": 1, **BINARY_SUFFIXES, **DECIMAL_SUFFIXES}


def test_suffix_tables_are_kubernetes_powers():
    assert BINARY_SUFFIXES == {
        "Ki": 1024,
        "Mi": 1024**2,
        "Gi": 1024**3,
        "Ti": 1024**4,
        "Pi": 1024**5,
        "Ei": 1024**6,
    }
    assert DECIMAL_SUFFIXES == {
        "k": 1000,
        "M": 1000**2,
        "G": 1000**3,
        "T": 1000**4,
        "P": 1000**5,
        "E": 1000**6,
    }
    assert MAX_BYTES == 2**63 - 1


VALID = [
    ("8Gi", 8_589_934_592),
    ("512Mi", 512 * 1024**2),
    ("1Ki", 1024),
    ("1Mi", 1024**2),
    ("1Gi", 1024**3),
    ("1Ti", 1024**4),
    ("1Pi", 1024**5),
    ("1Ei", 1024**6),
    ("7Ei", 7 * 1024**6),
    ("1k", 1000),
    ("1M", 1000**2),
    ("1G", 1000**3),
    ("10G", 10 * 1000**3),
    ("1T", 1000**4),
    ("1P", 1000**5),
    ("9E", 9 * 1000**6),
    ("0", 0),
    ("0Gi", 0),
    ("4096", 4096),
    ("9223372036854775807", MAX_BYTES),
    (" 8Gi ", 8_589_934_592),
    ("8 Gi", 8_589_934_592),
    ("1.5Ki", 1536),
    ("0.1Ki", 103),
    (".5Ki", 512),
    ("0.5", 1),
    ("1.0000000000000000000000000000001", 2),
    (0, 0),
    (4096, 4096),
    (MAX_BYTES, MAX_BYTES),
    (4096.0, 4096),
]


@pytest.mark.parametrize(
    ("value", "expected"),
    VALID,
    ids=[
        "8Gi",
        "512Mi",
        "Ki",
        "Mi",
        "Gi",
        "Ti",
        "Pi",
        "Ei",
        "7Ei just under int64",
        "k",
        "M",
        "G",
        "10G",
        "T",
        "P",
        "9E just under int64",
        "zero string",
        "zero with suffix",
        "bare digits",
        "int64 max as string",
        "surrounding spaces",
        "space before suffix",
        "fraction exact",
        "fraction rounds up",
        "leading dot",
        "fraction of a byte rounds up",
        "fraction beyond 28 digits still rounds up",
        "int zero",
        "int bytes",
        "int64 max",
        "whole float",
    ],
)
def test_parse_bytes_accepts(value, expected):
    result = parse_bytes(value, "memory")
    assert result == expected
    assert type(result) is int


INVALID = [
    ("8GB", ValueError, ["memory", "'8GB'", "did you mean 8Gi", "8G for 1000^n"]),
    ("8gb", ValueError, ["memory", "did you mean 8Gi"]),
    ("8Kb", ValueError, ["memory", "did you mean 8Ki", "8k for 1000^n"]),
    ("lots", ValueError, ["memory", "Ki Mi Gi Ti Pi", "k M G T P"]),
    ("8 Gb", ValueError, ["memory", "Ki Mi Gi"]),
    ("Gi", ValueError, ["memory", "Ki Mi Gi"]),
    ("", ValueError, ["memory", "Ki Mi Gi"]),
    ("   ", ValueError, ["memory", "Ki Mi Gi"]),
    ("8K", ValueError, ["memory", "Ki Mi Gi"]),
    ("8gi", ValueError, ["memory", "Ki Mi Gi"]),
    ("8m", ValueError, ["memory", "Ki Mi Gi"]),
    ("1e3", ValueError, ["memory", "Ki Mi Gi"]),
    ("8Gi8", ValueError, ["memory"]),
    ("0x10", ValueError, ["memory"]),
    ("8.", ValueError, ["memory"]),
    ("1,024", ValueError, ["memory"]),
    ("+8Gi", ValueError, ["memory"]),
    ("٣Gi", ValueError, ["memory"]),
    ("-1Gi", ValueError, ["memory", "negative"]),
    ("-1", ValueError, ["memory", "negative"]),
    (" -0", ValueError, ["memory", "negative"]),
    (-1, ValueError, ["memory", "negative"]),
    (-1.0, ValueError, ["memory", "negative"]),
    (float("inf"), ValueError, ["memory", "finite"]),
    (float("-inf"), ValueError, ["memory", "finite"]),
    (float("nan"), ValueError, ["memory", "finite"]),
    (1.5, ValueError, ["memory", "whole"]),
    (MAX_BYTES + 1, ValueError, ["memory", "2^63 - 1"]),
    (10**5000, ValueError, ["memory", "2^63 - 1"]),
    ("9223372036854775808", ValueError, ["memory", "2^63 - 1"]),
    ("8Ei", ValueError, ["memory", "2^63 - 1"]),
    ("10E", ValueError, ["memory", "2^63 - 1"]),
    ("9" * 5000, ValueError, ["memory", "2^63 - 1"]),
    (1e30, ValueError, ["memory", "2^63 - 1"]),
    (True, TypeError, ["memory", "bool"]),
    (False, TypeError, ["memory", "bool"]),
    (None, TypeError, ["memory", "NoneType"]),
    ([1], TypeError, ["memory", "list"]),
    (b"8Gi", TypeError, ["memory", "bytes"]),
    (Decimal("8"), TypeError, ["memory", "Decimal"]),
]


@pytest.mark.parametrize(
    ("value", "error", "fragments"),
    INVALID,
    ids=[
        "8GB ambiguous",
        "8gb ambiguous",
        "8Kb ambiguous",
        "word",
        "8 Gb",
        "suffix without number",
        "empty",
        "blank",
        "uppercase K",
        "lowercase gi",
        "milli",
        "exponent",
        "trailing digits",
        "hex",
        "trailing dot",
        "thousands separator",
        "explicit plus",
        "non-ascii digit",
        "negative with suffix",
        "negative string",
        "negative zero string",
        "negative int",
        "negative float",
        "inf",
        "-inf",
        "nan",
        "fractional float",
        "int64 max + 1",
        "int beyond str conversion limit",
        "int64 max + 1 as string",
        "8Ei overflows int64",
        "10E overflows int64",
        "huge digit string",
        "huge float",
        "bool True",
        "bool False",
        "None",
        "list",
        "bytes",
        "Decimal",
    ],
)
def test_parse_bytes_refuses_naming_the_field(value, error, fragments):
    with pytest.raises(error) as caught:
        parse_bytes(value, "memory")
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message


def test_error_names_the_field_it_was_given():
    with pytest.raises(ValueError, match=r"^disk\b"):
        parse_bytes("8GB", "disk")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (8 * 1024**3, "8.0 GiB"),
        (1024**4, "1.0 TiB"),
        (MAX_BYTES, "8192.0 PiB"),
    ],
    ids=["zero", "just under KiB", "one KiB", "fractional KiB", "8 GiB", "one TiB", "int64 max stays PiB"],
)
def test_format_bytes(value, expected):
    assert format_bytes(value) == expected


@given(n=st.integers(min_value=0, max_value=MAX_BYTES * 2), suffix=st.sampled_from(sorted(ALL_SUFFIXES)))
def test_integer_with_any_suffix_is_n_times_multiplier(n, suffix):
    expected = n * ALL_SUFFIXES[suffix]
    if expected <= MAX_BYTES:
        assert parse_bytes(f"{n}{suffix}", "memory") == expected
    else:
        with pytest.raises(ValueError, match="memory"):
            parse_bytes(f"{n}{suffix}", "memory")


@given(
    whole=st.integers(min_value=0, max_value=10**6),
    fraction=st.text(alphabet="0123456789", min_size=1, max_size=40),
    suffix=st.sampled_from(sorted(ALL_SUFFIXES)),
)
def test_fractions_round_up_to_the_next_whole_byte(whole, fraction, suffix):
    text = f"{whole}.{fraction}{suffix}"
    exact = Fraction(f"{whole}.{fraction}") * ALL_SUFFIXES[suffix]
    if math.ceil(exact) <= MAX_BYTES:
        assert parse_bytes(text, "memory") == math.ceil(exact)
    else:
        with pytest.raises(ValueError, match="memory"):
            parse_bytes(text, "memory")


def _check_total(value: object) -> None:
    try:
        result = parse_bytes(value, "memory")
    except (ValueError, TypeError) as exc:
        assert "memory" in str(exc)
    else:
        assert type(result) is int
        assert 0 <= result <= MAX_BYTES


@given(st.text())
def test_arbitrary_text_only_raises_value_or_type_error(text):
    _check_total(text)


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(alphabet="0123456789.kMGTPEi -+ \t", max_size=30),
        st.binary(),
        st.decimals(),
        st.fractions(),
        st.complex_numbers(),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
        st.tuples(st.integers()),
    )
)
def test_arbitrary_objects_only_raise_value_or_type_error(value):
    _check_total(value)
