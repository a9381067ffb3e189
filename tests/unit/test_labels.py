"""Worker labels and workflow affinity follow Kubernetes label syntax."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from flux.domain.labels import MAX_LABELS, parse_label_argument, validate_labels

NAME_63 = "a" + "b" * 61 + "c"
PREFIX_253 = ".".join(["p" * 63, "q" * 63, "r" * 63, "s" * 61])


def test_boundary_fixtures_have_the_intended_lengths():
    assert len(NAME_63) == 63
    assert len(PREFIX_253) == 253


VALID = [
    ({"role": "training"}, {"role": "training"}),
    ({"example.com/zone": "eu-1"}, {"example.com/zone": "eu-1"}),
    ({"role": ""}, {"role": ""}),
    ({}, {}),
    (None, {}),
    ({"a": "b"}, {"a": "b"}),
    ({"Role_1.x-y": "A_b.c-D"}, {"Role_1.x-y": "A_b.c-D"}),
    ({"7": "9"}, {"7": "9"}),
    ({NAME_63: NAME_63}, {NAME_63: NAME_63}),
    ({f"{PREFIX_253}/zone": "x"}, {f"{PREFIX_253}/zone": "x"}),
    ({"k8s.io/a-b": "v"}, {"k8s.io/a-b": "v"}),
    (MappingProxyType({"role": "training"}), {"role": "training"}),
    ({f"k{i}": "v" for i in range(MAX_LABELS)}, {f"k{i}": "v" for i in range(MAX_LABELS)}),
]


@pytest.mark.parametrize(
    ("labels", "expected"),
    VALID,
    ids=[
        "simple",
        "prefixed key",
        "empty value",
        "empty mapping",
        "None",
        "single characters",
        "inner punctuation",
        "digits only",
        "63-character key and value",
        "253-character prefix",
        "prefix with digits",
        "read-only mapping",
        "most labels allowed",
    ],
)
def test_validate_labels_accepts(labels, expected):
    result = validate_labels(labels, "affinity")
    assert result == expected
    assert type(result) is dict


INVALID = [
    ({"ro le": "x"}, ValueError, ["affinity", "'ro le'", "1-63"]),
    ({"role": "has space"}, ValueError, ["affinity['role']", "'has space'", "1-63"]),
    ({"a" * 64: "x"}, ValueError, ["affinity", "key", "1-63"]),
    ({"role": "a" * 64}, ValueError, ["affinity['role']", "value", "1-63"]),
    ({"-role": "x"}, ValueError, ["affinity", "'-role'"]),
    ({"role-": "x"}, ValueError, ["affinity", "'role-'"]),
    ({"_role": "x"}, ValueError, ["affinity", "'_role'"]),
    ({"role": "-x"}, ValueError, ["affinity['role']", "'-x'"]),
    ({"role": "x."}, ValueError, ["affinity['role']", "'x.'"]),
    ({"": "x"}, ValueError, ["affinity", "key ''"]),
    ({"role\n": "x"}, ValueError, ["affinity", "key"]),
    ({"role": "x\n"}, ValueError, ["affinity['role']", "value"]),
    ({"rôle": "x"}, ValueError, ["affinity", "key"]),
    ({"role": "tráining"}, ValueError, ["affinity['role']"]),
    ({"Example.com/zone": "x"}, ValueError, ["affinity", "key"]),
    ({"/zone": "x"}, ValueError, ["affinity", "key"]),
    ({"a/b/c": "x"}, ValueError, ["affinity", "key"]),
    ({"example.com/": "x"}, ValueError, ["affinity", "key"]),
    ({f"{PREFIX_253}p/zone": "x"}, ValueError, ["affinity", "key"]),
    ({"role=x": "y"}, ValueError, ["affinity", "key"]),
    ({1: "x"}, (ValueError, TypeError), ["affinity", "1"]),
    ({None: "x"}, (ValueError, TypeError), ["affinity", "None"]),
    ({"role": 1}, (ValueError, TypeError), ["affinity['role']", "1"]),
    ({"role": None}, (ValueError, TypeError), ["affinity['role']", "None"]),
    ({"role": True}, (ValueError, TypeError), ["affinity['role']", "True"]),
    ("role=training", TypeError, ["affinity", "dict", "str"]),
    ([("role", "training")], TypeError, ["affinity", "dict", "list"]),
    ({f"k{i}": "v" for i in range(MAX_LABELS + 1)}, ValueError, ["affinity", str(MAX_LABELS)]),
]


@pytest.mark.parametrize(
    ("labels", "error", "fragments"),
    INVALID,
    ids=[
        "space in key",
        "space in value",
        "key 64 characters",
        "value 64 characters",
        "key leading dash",
        "key trailing dash",
        "key leading underscore",
        "value leading dash",
        "value trailing dot",
        "empty key",
        "key trailing newline",
        "value trailing newline",
        "non-ascii key",
        "non-ascii value",
        "uppercase prefix",
        "empty prefix",
        "two slashes",
        "empty name after prefix",
        "prefix over 253",
        "equals in key",
        "int key",
        "None key",
        "int value",
        "None value",
        "bool value",
        "string instead of mapping",
        "list of pairs",
        "too many labels",
    ],
)
def test_validate_labels_refuses_naming_the_field(labels, error, fragments):
    with pytest.raises(error) as caught:
        validate_labels(labels, "affinity")
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message


def test_validate_labels_names_whichever_field_it_is_given():
    with pytest.raises(ValueError, match=r"^labels "):
        validate_labels({"bad key": "x"}, "labels")


def test_validate_labels_returns_a_copy():
    source = {"role": "training"}
    result = validate_labels(source, "affinity")
    result["role"] = "changed"
    assert source == {"role": "training"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("role=training", ("role", "training")),
        ("role=", ("role", "")),
        ("example.com/zone=eu-1", ("example.com/zone", "eu-1")),
        (f"{NAME_63}={NAME_63}", (NAME_63, NAME_63)),
    ],
    ids=["simple", "empty value", "prefixed key", "63-character key and value"],
)
def test_parse_label_argument_accepts(text, expected):
    assert parse_label_argument(text) == expected


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("role", ["--label", "'role'", "KEY=VALUE"]),
        ("", ["--label", "KEY=VALUE"]),
        ("=training", ["--label", "key ''"]),
        ("role=a=b", ["--label", "'a=b'"]),
        ("role=has space", ["--label", "'has space'"]),
        ("bad key=x", ["--label", "'bad key'"]),
        ("role=" + "a" * 64, ["--label", "value"]),
    ],
    ids=[
        "no equals",
        "empty",
        "empty key",
        "second equals",
        "space in value",
        "space in key",
        "value too long",
    ],
)
def test_parse_label_argument_refuses(text, fragments):
    with pytest.raises(ValueError) as caught:
        parse_label_argument(text)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message
