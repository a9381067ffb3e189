"""``@workflow`` / ``@workflow.with_options`` and ``ExecutionContext``: the public SDK surface."""

from __future__ import annotations

import dataclasses
import typing

import pytest

import flux
from flux import ExecutionContext, workflow
from flux.domain.resource_request import ResourceRequest
from flux.workflow import DEFAULT_MAX_ATTEMPTS, WorkflowDefinition, definition_of


def test_public_imports():
    assert flux.workflow is workflow
    assert flux.ExecutionContext is ExecutionContext
    assert flux.ResourceRequest is ResourceRequest
    assert set(flux.__all__) >= {"workflow", "ExecutionContext", "ResourceRequest"}
    assert ResourceRequest.__module__ == "flux.domain.resource_request"


# The design document's example, verbatim.
@workflow.with_options(
    name="data_processing_workflow",
    requests=ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]),
    affinity={"role": "training"},
)
async def data_processing_workflow(ctx: ExecutionContext[dict[str, str]]):
    return {"rows": len(ctx.input)}


async def test_design_example_declares_and_runs():
    definition = definition_of(data_processing_workflow)
    assert definition == WorkflowDefinition(
        name="data_processing_workflow",
        entrypoint="data_processing_workflow",
        requests=ResourceRequest(cpu=4, memory=8_589_934_592, packages=["pandas>=1.3.0", "numpy"]),
        affinity={"role": "training"},
        max_attempts=DEFAULT_MAX_ATTEMPTS,
        is_async=True,
    )
    result = await data_processing_workflow(ExecutionContext(input={"a": "1", "b": "2"}))
    assert result == {"rows": 2}


def test_design_example_annotation_resolves():
    hints = typing.get_type_hints(data_processing_workflow)
    assert hints["ctx"] == ExecutionContext[dict[str, str]]
    assert typing.get_origin(hints["ctx"]) is ExecutionContext
    assert typing.get_args(hints["ctx"]) == (dict[str, str],)


async def test_bare_decorator_on_async_function():
    async def double(ctx: ExecutionContext[int]) -> int:
        return ctx.input * 2

    decorated = workflow(double)
    assert decorated is double
    definition = definition_of(double)
    assert definition is double.__flux_workflow__
    assert definition == WorkflowDefinition(
        name="double",
        entrypoint="double",
        requests=ResourceRequest(),
        affinity={},
        max_attempts=3,
        is_async=True,
    )
    assert await double(ExecutionContext(input=21)) == 42


def test_bare_decorator_on_sync_function():
    @workflow
    def add_one(ctx: ExecutionContext[int]) -> int:
        return ctx.input + 1

    definition = definition_of(add_one)
    assert definition is not None
    assert definition.is_async is False
    assert definition.name == "add_one"
    assert add_one(ExecutionContext(input=1)) == 2


async def test_with_options_records_every_option():
    requests = ResourceRequest(cpu=4, memory="8Gi", gpu=1, packages=["torch>=2.0.0", "transformers"])

    async def train(ctx: ExecutionContext[dict[str, str]]) -> str:
        return ctx.workflow_name

    decorated = workflow.with_options(
        name="trainer.v2-final",
        requests=requests,
        affinity={"role": "training", "example.com/zone": "eu-1"},
        max_attempts=5,
    )(train)

    assert decorated is train
    definition = definition_of(train)
    assert definition.name == "trainer.v2-final"
    assert definition.entrypoint == "train"
    assert definition.requests is requests
    assert dict(definition.affinity) == {"role": "training", "example.com/zone": "eu-1"}
    assert definition.max_attempts == 5
    assert definition.is_async is True
    assert await train(ExecutionContext(input={}, workflow_name="trainer.v2-final")) == "trainer.v2-final"


def test_with_options_without_arguments_uses_defaults():
    @workflow.with_options()
    def plain(ctx):
        return None

    assert definition_of(plain) == WorkflowDefinition(
        name="plain", entrypoint="plain", max_attempts=DEFAULT_MAX_ATTEMPTS, is_async=False
    )


def test_affinity_is_copied_and_read_only():
    affinity = {"role": "training"}

    @workflow.with_options(affinity=affinity)
    def job(ctx):
        return None

    affinity["role"] = "changed"
    definition = definition_of(job)
    assert definition.affinity == {"role": "training"}
    with pytest.raises(TypeError):
        definition.affinity["role"] = "other"


@pytest.mark.parametrize("field", ["name", "entrypoint", "requests", "affinity", "max_attempts", "is_async"])
def test_definition_is_frozen(field):
    @workflow
    async def frozen(ctx):
        return None

    definition = definition_of(frozen)
    before = getattr(definition, field)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(definition, field, "changed")
    assert getattr(definition, field) == before


@pytest.mark.parametrize(
    ("options", "valid"),
    [
        ({"max_attempts": 1}, True),
        ({"max_attempts": 100}, True),
        ({"name": "a"}, True),
        ({"name": "_private"}, True),
        ({"name": "a" * 128}, True),
        ({"name": "pkg.module:fn"}, False),
    ],
    ids=[
        "one attempt",
        "most attempts",
        "one-letter name",
        "underscore first",
        "128-character name",
        "colon",
    ],
)
def test_option_boundaries(options, valid):
    if valid:
        decorate = workflow.with_options(**options)

        def fn(ctx):
            return None

        assert decorate(fn) is fn
        definition = definition_of(fn)
        for key, value in options.items():
            assert getattr(definition, key) == value
    else:
        with pytest.raises(ValueError, match="name"):
            workflow.with_options(**options)


INVALID_OPTIONS = [
    ({"requests": "4 cpus"}, TypeError, ["requests", "ResourceRequest", "str"]),
    ({"requests": {"cpu": 4}}, TypeError, ["requests", "ResourceRequest", "dict"]),
    ({"affinity": {"bad key": "x"}}, ValueError, ["affinity", "'bad key'"]),
    ({"affinity": {"role": "bad value"}}, ValueError, ["affinity['role']", "'bad value'"]),
    ({"affinity": "role=training"}, TypeError, ["affinity", "dict"]),
    ({"name": "has space"}, ValueError, ["name", "'has space'", "letters, digits"]),
    ({"name": ""}, ValueError, ["name", "''"]),
    ({"name": "1st"}, ValueError, ["name", "'1st'"]),
    ({"name": "-x"}, ValueError, ["name", "'-x'"]),
    ({"name": "a" * 129}, ValueError, ["name", "1-128"]),
    ({"name": "job\n"}, ValueError, ["name"]),
    ({"name": 5}, ValueError, ["name", "5"]),
    ({"max_attempts": 0}, ValueError, ["max_attempts", "between 1 and 100"]),
    ({"max_attempts": -1}, ValueError, ["max_attempts"]),
    ({"max_attempts": 101}, ValueError, ["max_attempts", "between 1 and 100"]),
    ({"max_attempts": True}, TypeError, ["max_attempts", "int", "bool"]),
    ({"max_attempts": "3"}, TypeError, ["max_attempts", "int", "str"]),
    ({"max_attempts": 3.0}, TypeError, ["max_attempts", "int", "float"]),
    ({"max_attempts": None}, TypeError, ["max_attempts", "int"]),
]


@pytest.mark.parametrize(
    ("options", "error", "fragments"),
    INVALID_OPTIONS,
    ids=[
        "requests as string",
        "requests as dict",
        "affinity bad key",
        "affinity bad value",
        "affinity as string",
        "name with space",
        "name empty",
        "name starts with digit",
        "name starts with dash",
        "name too long",
        "name trailing newline",
        "name not a string",
        "max_attempts zero",
        "max_attempts negative",
        "max_attempts over 100",
        "max_attempts bool",
        "max_attempts string",
        "max_attempts float",
        "max_attempts None",
    ],
)
def test_invalid_options_raise_at_decoration_naming_the_field(options, error, fragments):
    # Raised by with_options itself, before any function is seen.
    with pytest.raises(error) as caught:
        workflow.with_options(**options)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message


def test_invalid_function_name_is_refused_when_no_name_is_given():
    with pytest.raises(ValueError, match="function name '<lambda>'"):
        workflow(lambda ctx: None)


def test_explicit_name_allows_any_function_name():
    fn = workflow.with_options(name="named")(lambda ctx: ctx.input)
    assert definition_of(fn).name == "named"
    assert definition_of(fn).entrypoint == "<lambda>"
    assert fn(ExecutionContext(input=7)) == 7


@pytest.mark.parametrize("target", [42, "fn", None], ids=["int", "str", "None"])
def test_decorating_a_non_callable_is_refused(target):
    with pytest.raises(TypeError, match="@workflow decorates a function"):
        workflow(target)


@pytest.mark.parametrize(
    "target",
    [
        lambda: None,
        type("WithJunk", (), {"__flux_workflow__": "not a definition"})(),
        object(),
    ],
    ids=["plain function", "foreign attribute", "plain object"],
)
def test_definition_of_undecorated_is_none(target):
    assert definition_of(target) is None


def test_execution_context_fields_and_defaults():
    ctx = ExecutionContext(input={"x": 1})
    assert [f.name for f in dataclasses.fields(ExecutionContext)] == [
        "input",
        "execution_id",
        "workflow_name",
        "worker_name",
        "attempt",
        "assigned_gpus",
        "last_heartbeat",
        "gang",
        "upstream",
        "_beat",
    ]
    assert (
        ctx.input,
        ctx.execution_id,
        ctx.workflow_name,
        ctx.worker_name,
        ctx.attempt,
        ctx.assigned_gpus,
    ) == ({"x": 1}, "local", "", "", 1, ())


def test_execution_context_takes_every_field():
    ctx = ExecutionContext(
        input=[1, 2],
        execution_id="ex-1",
        workflow_name="wf",
        worker_name="gpu-box",
        attempt=2,
        assigned_gpus=(0, 3),
    )
    assert ctx.execution_id == "ex-1"
    assert ctx.workflow_name == "wf"
    assert ctx.worker_name == "gpu-box"
    assert ctx.attempt == 2
    assert ctx.assigned_gpus == (0, 3)
    assert ctx.input == [1, 2]


def test_execution_context_is_frozen():
    ctx = ExecutionContext(input=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.attempt = 2
    assert ctx.attempt == 1


def test_execution_context_is_generic():
    alias = ExecutionContext[dict[str, str]]
    assert typing.get_origin(alias) is ExecutionContext
    assert typing.get_args(alias) == (dict[str, str],)
    # Calling the subscripted alias must build an ordinary, still frozen, context.
    ctx = alias(input={"k": "v"})
    assert isinstance(ctx, ExecutionContext)
    assert ctx.input == {"k": "v"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.input = {}


def test_priority_is_declared_and_bounded():
    @workflow.with_options(priority=7)
    async def urgent(ctx):
        return None

    assert definition_of(urgent).priority == 7
    assert definition_of(data_processing_workflow).priority == 0
    with pytest.raises(
        ValueError, match=r"priority must be between -1000 and 1000 \(higher runs first\); got 1001"
    ):
        workflow.with_options(priority=1001)
    with pytest.raises(TypeError, match=r"priority must be an int between -1000 and 1000 .*; got str 'high'"):
        workflow.with_options(priority="high")
    with pytest.raises(TypeError, match="priority must be an int"):
        workflow.with_options(priority=True)
