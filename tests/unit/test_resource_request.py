"""ResourceRequest: what a workflow declares, validated at the declaration line."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement

from flux.domain.quantity import MAX_BYTES
from flux.domain.resource_request import (
    MAX_COUNT,
    MAX_PACKAGES,
    MAX_REQUIREMENT_LENGTH,
    ResourceRequest,
)

GI = 1024**3

# (built, cpu, memory, gpu, disk, packages)
CONSTRUCTIONS = [
    (
        lambda: ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]),
        (4, 8 * GI, 0, 0, ("pandas>=1.3.0", "numpy")),
    ),
    (lambda: ResourceRequest(memory="512Mi"), (0, 512 * 1024**2, 0, 0, ())),
    (lambda: ResourceRequest(memory=4096), (0, 4096, 0, 0, ())),
    (lambda: ResourceRequest.with_cpu(8), (8, 0, 0, 0, ())),
    (lambda: ResourceRequest.with_memory("16Gi"), (0, 16 * GI, 0, 0, ())),
    (lambda: ResourceRequest.with_gpu(2), (0, 0, 2, 0, ())),
    (lambda: ResourceRequest.with_disk(50_000_000_000), (0, 0, 0, 50_000_000_000, ())),
    (lambda: ResourceRequest.with_disk("100Gi"), (0, 0, 0, 100 * GI, ())),
    (
        lambda: ResourceRequest.with_packages(["scipy", "scikit-learn>=1.2.0"]),
        (0, 0, 0, 0, ("scipy", "scikit-learn>=1.2.0")),
    ),
    (
        lambda: ResourceRequest(cpu=4, memory="8Gi", gpu=1, packages=["torch>=2.0.0", "transformers"]),
        (4, 8 * GI, 1, 0, ("torch>=2.0.0", "transformers")),
    ),
    (lambda: ResourceRequest(), (0, 0, 0, 0, ())),
    (lambda: ResourceRequest(cpu=0, memory=0, gpu=0, disk=0, packages=[]), (0, 0, 0, 0, ())),
    (lambda: ResourceRequest(packages=("numpy",)), (0, 0, 0, 0, ("numpy",))),
    (lambda: ResourceRequest(packages=(p for p in ["numpy"])), (0, 0, 0, 0, ("numpy",))),
    (
        lambda: ResourceRequest(cpu=MAX_COUNT, memory=MAX_BYTES, gpu=MAX_COUNT, disk=MAX_BYTES),
        (MAX_COUNT, MAX_BYTES, MAX_COUNT, MAX_BYTES, ()),
    ),
    (lambda: ResourceRequest(packages=["numpy"] * MAX_PACKAGES), (0, 0, 0, 0, ("numpy",) * MAX_PACKAGES)),
    (
        lambda: ResourceRequest(packages=["a" * MAX_REQUIREMENT_LENGTH]),
        (0, 0, 0, 0, ("a" * MAX_REQUIREMENT_LENGTH,)),
    ),
]


@pytest.mark.parametrize(
    ("build", "expected"),
    CONSTRUCTIONS,
    ids=[
        "design example",
        "memory 512Mi",
        "memory int bytes",
        "with_cpu",
        "with_memory",
        "with_gpu",
        "with_disk int",
        "with_disk string",
        "with_packages",
        "gpu training example",
        "empty",
        "explicit zeros",
        "packages tuple",
        "packages generator",
        "every field at its maximum",
        "most packages allowed",
        "longest requirement allowed",
    ],
)
def test_constructs(build, expected):
    request = build()
    assert (request.cpu, request.memory, request.gpu, request.disk, request.packages) == expected
    assert type(request.packages) is tuple


def test_8gi_is_8589934592_bytes():
    assert ResourceRequest(memory="8Gi").memory == 8_589_934_592
    assert ResourceRequest(disk="8Gi").disk == 8_589_934_592


@pytest.mark.parametrize(
    ("request_", "empty"),
    [
        (ResourceRequest(), True),
        (ResourceRequest(cpu=0, packages=[]), True),
        (ResourceRequest(cpu=1), False),
        (ResourceRequest(memory=1), False),
        (ResourceRequest(gpu=1), False),
        (ResourceRequest(disk=1), False),
        (ResourceRequest(packages=["numpy"]), False),
    ],
    ids=["nothing", "zeros", "cpu", "memory", "gpu", "disk", "packages"],
)
def test_is_empty(request_, empty):
    assert request_.is_empty is empty


INVALID = [
    ({"memory": "8GB"}, ValueError, ["memory", "Gi"]),
    ({"memory": "8gb"}, ValueError, ["memory", "Gi"]),
    ({"memory": "lots"}, ValueError, ["memory", "Ki Mi Gi"]),
    ({"memory": "8 Gb"}, ValueError, ["memory", "Ki Mi Gi"]),
    ({"memory": "Gi"}, ValueError, ["memory", "Ki Mi Gi"]),
    ({"memory": ""}, ValueError, ["memory", "Ki Mi Gi"]),
    ({"disk": "50GB"}, ValueError, ["disk", "Gi"]),
    ({"cpu": -1}, ValueError, ["cpu", ">= 0"]),
    ({"gpu": -1}, ValueError, ["gpu", ">= 0"]),
    ({"memory": -1}, ValueError, ["memory", "negative"]),
    ({"memory": "-1Gi"}, ValueError, ["memory", "negative"]),
    ({"disk": "-1Gi"}, ValueError, ["disk", "negative"]),
    ({"memory": float("inf")}, ValueError, ["memory", "finite"]),
    ({"memory": float("nan")}, ValueError, ["memory", "finite"]),
    ({"cpu": float("inf")}, ValueError, ["cpu", "finite"]),
    ({"cpu": float("nan")}, ValueError, ["cpu", "finite"]),
    ({"cpu": 1.5}, ValueError, ["cpu", "whole"]),
    ({"gpu": 0.5}, ValueError, ["gpu", "whole"]),
    ({"cpu": True}, TypeError, ["cpu", "bool", "int"]),
    ({"gpu": False}, TypeError, ["gpu", "bool", "int"]),
    ({"memory": False}, TypeError, ["memory", "bool"]),
    ({"disk": True}, TypeError, ["disk", "bool"]),
    ({"cpu": "4"}, TypeError, ["cpu", "int", "str"]),
    ({"gpu": [1]}, TypeError, ["gpu", "int", "list"]),
    ({"memory": [1]}, TypeError, ["memory", "list"]),
    ({"cpu": MAX_COUNT + 1}, ValueError, ["cpu", str(MAX_COUNT)]),
    ({"gpu": MAX_COUNT + 1}, ValueError, ["gpu", str(MAX_COUNT)]),
    ({"cpu": 10**5000}, ValueError, ["cpu", str(MAX_COUNT)]),
    ({"memory": MAX_BYTES + 1}, ValueError, ["memory", "2^63 - 1"]),
    ({"disk": MAX_BYTES + 1}, ValueError, ["disk", "2^63 - 1"]),
    ({"memory": "8Ei"}, ValueError, ["memory", "2^63 - 1"]),
    ({"packages": "numpy"}, TypeError, ["packages", "PEP 508", "single string"]),
    ({"packages": b"numpy"}, TypeError, ["packages", "PEP 508"]),
    ({"packages": 5}, TypeError, ["packages", "PEP 508", "int"]),
    ({"packages": [1]}, TypeError, ["packages[0]", "PEP 508", "int"]),
    ({"packages": ["numpy", None]}, TypeError, ["packages[1]", "NoneType"]),
    ({"packages": ["numpy", "pandas>=>1"]}, ValueError, ["packages[1]", "'pandas>=>1'", "PEP 508"]),
    ({"packages": [""]}, ValueError, ["packages[0]", "PEP 508"]),
    ({"packages": ["numpy==="]}, ValueError, ["packages[0]", "'numpy==='"]),
    ({"packages": ["numpy", "scipy", "torch >= 2 <3"]}, ValueError, ["packages[2]"]),
    ({"packages": ["numpy;"]}, ValueError, ["packages[0]"]),
    ({"packages": ["a" * (MAX_REQUIREMENT_LENGTH + 1)]}, ValueError, ["packages[0]", "longer than"]),
    ({"packages": ["numpy"] * (MAX_PACKAGES + 1)}, ValueError, ["packages", str(MAX_PACKAGES)]),
]


@pytest.mark.parametrize(
    ("kwargs", "error", "fragments"),
    INVALID,
    ids=[
        "memory 8GB",
        "memory 8gb",
        "memory word",
        "memory 8 Gb",
        "memory suffix only",
        "memory empty",
        "disk 50GB",
        "cpu negative",
        "gpu negative",
        "memory negative int",
        "memory negative string",
        "disk negative string",
        "memory inf",
        "memory nan",
        "cpu inf",
        "cpu nan",
        "cpu fractional",
        "gpu fractional",
        "cpu bool",
        "gpu bool",
        "memory bool",
        "disk bool",
        "cpu string",
        "gpu list",
        "memory list",
        "cpu over int32",
        "gpu over int32",
        "cpu astronomically large",
        "memory over int64",
        "disk over int64",
        "memory 8Ei over int64",
        "packages a single string",
        "packages bytes",
        "packages not iterable",
        "packages non-str item",
        "packages None item",
        "packages bad operator",
        "packages empty requirement",
        "packages empty arbitrary equality",
        "packages missing comma",
        "packages empty marker",
        "packages requirement too long",
        "packages too many",
    ],
)
def test_invalid_values_raise_at_construction_naming_the_field(kwargs, error, fragments):
    with pytest.raises(error) as caught:
        ResourceRequest(**kwargs)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    ("factory", "value", "error", "field"),
    [
        (ResourceRequest.with_cpu, -1, ValueError, "cpu"),
        (ResourceRequest.with_cpu, True, TypeError, "cpu"),
        (ResourceRequest.with_memory, "8GB", ValueError, "memory"),
        (ResourceRequest.with_gpu, "2", TypeError, "gpu"),
        (ResourceRequest.with_disk, -1, ValueError, "disk"),
        (ResourceRequest.with_packages, "numpy", TypeError, "packages"),
    ],
    ids=["with_cpu", "with_cpu bool", "with_memory", "with_gpu", "with_disk", "with_packages"],
)
def test_factories_validate_like_the_constructor(factory, value, error, field):
    with pytest.raises(error, match=field):
        factory(value)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (ResourceRequest(memory="8Gi"), ResourceRequest(memory=8_589_934_592)),
        (ResourceRequest(memory="1Gi"), ResourceRequest(memory="1024Mi")),
        (ResourceRequest(memory="1G"), ResourceRequest(memory=10**9)),
        (ResourceRequest(disk="50G"), ResourceRequest.with_disk(50_000_000_000)),
        (ResourceRequest(cpu=8), ResourceRequest.with_cpu(8)),
        (ResourceRequest(cpu=0), ResourceRequest()),
        (ResourceRequest(packages=["torch>=2,<3"]), ResourceRequest(packages=["torch<3,>=2"])),
        (ResourceRequest(packages=["numpy >= 1.0"]), ResourceRequest(packages=["numpy>=1.0"])),
        (ResourceRequest(packages=["numpy"]), ResourceRequest(packages=("numpy",))),
    ],
    ids=[
        "8Gi is its bytes",
        "1Gi is 1024Mi",
        "1G is 10^9",
        "disk factory",
        "cpu factory",
        "zero is omitted",
        "specifier order",
        "requirement spacing",
        "list or tuple",
    ],
)
def test_equal_requests_are_equal_and_hash_equal(left, right):
    assert left == right
    assert hash(left) == hash(right)
    assert len({left, right}) == 1


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (ResourceRequest(memory="1Gi"), ResourceRequest(memory="1G")),
        (ResourceRequest(cpu=4), ResourceRequest(gpu=4)),
        (ResourceRequest(memory=4096), ResourceRequest(disk=4096)),
        (ResourceRequest(packages=["numpy"]), ResourceRequest(packages=["numpy>=1"])),
        (ResourceRequest(packages=["numpy", "scipy"]), ResourceRequest(packages=["scipy", "numpy"])),
    ],
    ids=["Gi is not G", "cpu is not gpu", "memory is not disk", "specifier matters", "order is kept"],
)
def test_different_requests_differ(left, right):
    assert left != right


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (ResourceRequest(), "ResourceRequest()"),
        (
            ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]),
            "ResourceRequest(cpu=4, memory='8Gi', packages=['pandas>=1.3.0', 'numpy'])",
        ),
        (
            ResourceRequest(cpu=4, memory="8Gi", gpu=1, packages=["torch>=2.0.0", "transformers"]),
            "ResourceRequest(cpu=4, memory='8Gi', gpu=1, packages=['torch>=2.0.0', 'transformers'])",
        ),
        (ResourceRequest(memory=8_589_934_592), "ResourceRequest(memory='8Gi')"),
        (ResourceRequest(memory="512Mi"), "ResourceRequest(memory='512Mi')"),
        (ResourceRequest(disk=50_000_000_000), "ResourceRequest(disk='50G')"),
        (ResourceRequest(memory=4096), "ResourceRequest(memory=4096)"),
        (ResourceRequest(memory=1536), "ResourceRequest(memory=1536)"),
        (ResourceRequest(gpu=2), "ResourceRequest(gpu=2)"),
    ],
    ids=[
        "empty",
        "design example",
        "gpu example",
        "bytes shown as Gi",
        "Mi",
        "decimal G",
        "int shorter than 4Ki",
        "no exact suffix",
        "gpu only",
    ],
)
def test_repr_is_readable(request_, expected):
    assert repr(request_) == expected
    assert eval(repr(request_), {"ResourceRequest": ResourceRequest}) == request_


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (ResourceRequest(), "nothing"),
        (
            ResourceRequest(cpu=4, memory="8Gi", gpu=1, packages=["torch>=2.0.0"]),
            "4 cores, 8.0 GiB, 1 GPU, torch>=2.0.0",
        ),
        (ResourceRequest(cpu=1, gpu=2, disk="1Ti"), "1 core, 2 GPUs, 1.0 TiB disk"),
    ],
    ids=["empty", "plural cores singular gpu", "singular core plural gpus with disk"],
)
def test_describe(request_, expected):
    assert request_.describe() == expected


def test_requirements_are_parsed_packaging_objects():
    request = ResourceRequest(packages=["pandas>=1.3.0", "NumPy"])
    requirements = request.requirements
    assert all(isinstance(r, Requirement) for r in requirements)
    assert [r.name for r in requirements] == ["pandas", "NumPy"]
    assert requirements[0].specifier.contains("1.3.0")
    assert not requirements[0].specifier.contains("1.2.9")


@pytest.mark.parametrize("field", ["cpu", "memory", "gpu", "disk", "packages"])
def test_request_is_frozen(field):
    request = ResourceRequest(cpu=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(request, field, 2)
    assert request.cpu == 1


_REQUIREMENTS = st.sampled_from(
    ["numpy", "pandas>=1.3.0", "torch<3,>=2", "scikit-learn>=1.2.0", "requests[socks]", "a==1.*"]
)
VALID_REQUESTS = st.builds(
    ResourceRequest,
    cpu=st.none() | st.integers(0, MAX_COUNT),
    memory=st.none() | st.integers(0, MAX_BYTES),
    gpu=st.none() | st.integers(0, MAX_COUNT),
    disk=st.none() | st.integers(0, MAX_BYTES),
    packages=st.none() | st.lists(_REQUIREMENTS, max_size=4),
    gpu_memory=st.none() | st.just(0),
) | st.builds(
    ResourceRequest,
    gpu=st.integers(1, MAX_COUNT),
    gpu_memory=st.integers(0, MAX_BYTES) | st.sampled_from(["20Gi", "1.5Gi", "80G", "1"]),
)


@given(VALID_REQUESTS)
def test_repr_round_trips_through_eval(request_):
    assert eval(repr(request_), {"ResourceRequest": ResourceRequest}) == request_


ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.binary(max_size=10),
    st.lists(st.one_of(st.text(max_size=20), st.integers(), st.none()), max_size=4),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@given(
    st.fixed_dictionaries(
        {}, optional={f: ANYTHING for f in ("cpu", "memory", "gpu", "disk", "packages", "gpu_memory")}
    )
)
def test_any_input_either_constructs_a_valid_request_or_raises_a_field_naming_error(kwargs) -> None:
    """Fuzzing the declaration: a bad value never gets past the constructor, and never as another error."""
    try:
        request = ResourceRequest(**kwargs)
    except (TypeError, ValueError) as exc:
        assert any(field in str(exc) for field in ("cpu", "memory", "gpu", "disk", "packages"))
        return
    assert request.cpu >= 0 and request.memory >= 0 and request.gpu >= 0 and request.disk >= 0
    assert request.gpu_memory >= 0 and (request.gpu or not request.gpu_memory)
    assert ResourceRequest.from_proto(request.to_proto()) == request


# ---- gpu_memory: free VRAM per assigned GPU, parsed like memory -----------------------------------


@pytest.mark.parametrize(
    ("kwargs", "gpu_memory"),
    [
        pytest.param({"gpu": 1, "gpu_memory": "20Gi"}, 20 * GI, id="20Gi"),
        pytest.param({"gpu": 2, "gpu_memory": "24G"}, 24 * 10**9, id="decimal G"),
        pytest.param({"gpu": 1, "gpu_memory": 1}, 1, id="one byte"),
        pytest.param({"gpu": 1, "gpu_memory": 0}, 0, id="zero means not checked"),
        pytest.param({"gpu": 1}, 0, id="absent: the seed's gpu semantics"),
        pytest.param({"gpu": 0, "gpu_memory": 0}, 0, id="zero with no gpu"),
    ],
)
def test_gpu_memory_constructs(kwargs, gpu_memory):
    request = ResourceRequest(**kwargs)
    assert request.gpu_memory == gpu_memory
    assert ResourceRequest.from_proto(request.to_proto()) == request


@pytest.mark.parametrize(
    ("kwargs", "error", "fragments"),
    [
        pytest.param({"gpu": 1, "gpu_memory": "20GB"}, ValueError, ["gpu_memory", "Gi"], id="20GB"),
        pytest.param({"gpu": 1, "gpu_memory": "lots"}, ValueError, ["gpu_memory", "Ki Mi Gi"], id="word"),
        pytest.param({"gpu": 1, "gpu_memory": -1}, ValueError, ["gpu_memory", "negative"], id="negative"),
        pytest.param({"gpu": 1, "gpu_memory": True}, TypeError, ["gpu_memory", "bool"], id="bool"),
        pytest.param({"gpu": 1, "gpu_memory": 1.5}, ValueError, ["gpu_memory", "whole"], id="fraction"),
        pytest.param({"gpu": 1, "gpu_memory": MAX_BYTES + 1}, ValueError, ["gpu_memory", "2^63 - 1"], id="huge"),
        pytest.param(
            {"gpu_memory": "20Gi"}, ValueError, ["gpu_memory", "needs gpu >= 1", "gpu=1, gpu_memory='20Gi'"],
            id="without gpu",
        ),
    ],
)  # fmt: skip
def test_gpu_memory_is_validated_like_memory(kwargs, error, fragments):
    with pytest.raises(error) as caught:
        ResourceRequest(**kwargs)
    for fragment in fragments:
        assert fragment in str(caught.value)
    if "gpu" in kwargs and not isinstance(kwargs["gpu_memory"], bool):
        # The same words as memory, with the field's own name.
        with pytest.raises(error) as as_memory:
            ResourceRequest(memory=kwargs["gpu_memory"])
        assert str(caught.value) == str(as_memory.value).replace("memory", "gpu_memory")


def test_gpu_memory_shows_in_repr_and_describe():
    request = ResourceRequest(gpu=1, gpu_memory="20Gi")
    assert repr(request) == "ResourceRequest(gpu=1, gpu_memory='20Gi')"
    assert request.describe() == "1 GPU with 20.0 GiB free"
    assert not request.is_empty
    assert ResourceRequest(gpu=1, gpu_memory="20Gi") != ResourceRequest(gpu=1)
