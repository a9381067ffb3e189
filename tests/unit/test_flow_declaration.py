"""Flow control as declared: Concurrency, RateLimit, limits=, validated at declaration and read statically."""

from __future__ import annotations

import pytest

from flux import Concurrency, RateLimit, workflow
from flux.domain.limits import Flow, flow_from_proto, flow_to_proto, parse_rate
from flux.registration.declarations import read_declarations
from flux.workflow import definition_of


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("100/m", 100 / 60), ("5/s", 5.0), ("36/h", 0.01), ("0.5/s", 0.5), (" 10 / s ", 10.0)],
    ids=["per minute", "per second", "per hour", "fraction", "spaces"],
)
def test_rates(text: str, per_second: float) -> None:
    assert parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize(
    ("build", "error", "words"),
    [
        (lambda: Concurrency(max=0), ValueError, "Concurrency.max"),
        (lambda: Concurrency(max=True), TypeError, "Concurrency.max"),
        (lambda: Concurrency(max=2, key="a..b"), ValueError, "dotted path"),
        (lambda: Concurrency(max=2, key=5), TypeError, "Concurrency.key"),
        (lambda: RateLimit("100/d"), ValueError, "'N/s', 'N/m' or 'N/h'"),
        (lambda: RateLimit(100), TypeError, "RateLimit.rate"),
        (lambda: RateLimit("0/s"), ValueError, "above 0"),
        (lambda: RateLimit("1/s", burst=0), ValueError, "RateLimit.burst"),
        (lambda: workflow.with_options(concurrency=5), TypeError, "concurrency must be a Concurrency"),
        (lambda: workflow.with_options(rate_limit="1/s"), TypeError, "rate_limit must be a RateLimit"),
        (lambda: workflow.with_options(limits="openai"), TypeError, "limits must be a list"),
        (lambda: workflow.with_options(limits=["a b"]), ValueError, "limits[0]"),
        (lambda: workflow.with_options(limits=["a", "a"]), ValueError, "twice"),
    ],
    ids=[
        "max 0", "max bool", "bad key path", "key not str", "rate unit", "rate not str", "rate zero",
        "burst 0", "concurrency int", "rate_limit str", "limits str", "limit name", "limit twice",
    ],
)  # fmt: skip
def test_bad_declarations_name_the_field(build, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=None) as caught:
        build()
    assert words in str(caught.value)


def test_the_decorator_keeps_the_flow() -> None:
    @workflow.with_options(
        concurrency=Concurrency(max=5, key="customer"),
        rate_limit=RateLimit("100/m", key="customer", burst=10),
        limits=["openai"],
    )
    async def limited(ctx):
        return None

    definition = definition_of(limited)
    assert definition is not None
    flow = definition.flow
    assert flow == Flow(Concurrency(5, "customer"), RateLimit("100/m", "customer", 10), ("openai",))
    assert Flow.from_json(flow.to_json()) == flow
    assert flow_from_proto(flow_to_proto(flow)) == flow


@pytest.mark.parametrize(
    ("input_json", "key", "keys"),
    [
        ('{"customer": "acme"}', None, {"concurrency": "acme", "rate_limit": "acme", "limits": "acme"}),
        ('{"customer": 7}', None, {"concurrency": "7", "rate_limit": "7", "limits": "7"}),
        ('{"customer": "acme"}', "other", {"concurrency": "other", "rate_limit": "other", "limits": "other"}),
    ],
    ids=["string field", "number field", "run key overrides"],
)
def test_keys_resolve_from_the_input(input_json: str, key: str | None, keys: dict[str, str]) -> None:
    flow = Flow(Concurrency(5, "customer"), RateLimit("1/s", "customer"), ("openai",))
    assert flow.keys_for(input_json, key) == keys


def test_a_missing_key_field_is_refused() -> None:
    flow = Flow(Concurrency(5, "order.customer"))
    assert flow.keys_for('{"order": {"customer": "x"}}') == {"concurrency": "x"}
    with pytest.raises(ValueError, match="no field 'order.customer'"):
        flow.keys_for('{"order": 1}')
    assert Flow(Concurrency(2)).keys_for("null") == {"concurrency": ""}


def test_read_statically() -> None:
    source = (
        "from flux import workflow, Concurrency, RateLimit\n"
        "@workflow.with_options(concurrency=Concurrency(max=2, key='c'),\n"
        "    rate_limit=RateLimit('10/s'), limits=['db'])\n"
        "async def w(ctx):\n"
        "    return 1\n"
    )
    [definition] = read_declarations(source, "w.py")
    assert definition.flow == Flow(Concurrency(2, "c"), RateLimit("10/s"), ("db",))


def test_a_bad_value_read_statically_names_file_and_line() -> None:
    source = (
        "from flux import workflow, RateLimit\n"
        "@workflow.with_options(\n"
        "    rate_limit=RateLimit('10/d'))\n"
        "async def w(ctx):\n"
        "    return 1\n"
    )
    with pytest.raises(ValueError, match=r"w\.py:3: .*RateLimit\.rate"):
        read_declarations(source, "w.py")
