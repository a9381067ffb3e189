"""Domain types convert to and from ``flux.v1`` messages and validate on the way in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux.domain.execution import ExecutionError, WorkflowRef
from flux.domain.quantity import MAX_BYTES
from flux.domain.resource_request import MAX_COUNT, ResourceRequest
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.v1 import resources_pb2

INT32_MAX = 2**31 - 1


def _over_the_wire(message):
    """Serialise and parse again, so int32/int64 field widths are exercised too."""
    return type(message).FromString(message.SerializeToString())


REQUESTS = [
    ResourceRequest(),
    ResourceRequest(cpu=4, memory="8Gi", packages=["pandas>=1.3.0", "numpy"]),
    ResourceRequest(cpu=4, memory="8Gi", gpu=1, packages=["torch>=2.0.0", "transformers"]),
    ResourceRequest.with_disk(50_000_000_000),
    ResourceRequest.with_packages(["scipy", "scikit-learn>=1.2.0", 'numpy; python_version >= "3"']),
    ResourceRequest(cpu=MAX_COUNT, memory=MAX_BYTES, gpu=MAX_COUNT, disk=MAX_BYTES),
]
REQUEST_IDS = ["empty", "design example", "gpu example", "disk", "packages with marker", "maxima"]


@pytest.mark.parametrize("request_", REQUESTS, ids=REQUEST_IDS)
def test_resource_request_to_proto_carries_every_field(request_):
    message = request_.to_proto()
    assert isinstance(message, resources_pb2.ResourceRequest)
    assert (message.cpu, message.memory, message.gpu, message.disk, tuple(message.packages)) == (
        request_.cpu,
        request_.memory,
        request_.gpu,
        request_.disk,
        request_.packages,
    )


@pytest.mark.parametrize("request_", REQUESTS, ids=REQUEST_IDS)
def test_resource_request_round_trips(request_):
    back = ResourceRequest.from_proto(_over_the_wire(request_.to_proto()))
    assert back == request_
    assert hash(back) == hash(request_)


_REQUIREMENTS = st.sampled_from(
    ["numpy", "pandas>=1.3.0", "torch<3,>=2", "scikit-learn>=1.2.0", "requests[socks]", "a==1.*", "b~=1.4"]
)


@given(
    cpu=st.integers(0, MAX_COUNT),
    memory=st.integers(0, MAX_BYTES),
    gpu=st.integers(0, MAX_COUNT),
    disk=st.integers(0, MAX_BYTES),
    packages=st.lists(_REQUIREMENTS, max_size=5),
)
def test_resource_request_round_trip_property(cpu, memory, gpu, disk, packages):
    request = ResourceRequest(cpu=cpu, memory=memory, gpu=gpu, disk=disk, packages=packages)
    back = ResourceRequest.from_proto(_over_the_wire(request.to_proto()))
    assert back == request
    assert (back.cpu, back.memory, back.gpu, back.disk, back.packages) == (
        cpu,
        memory,
        gpu,
        disk,
        request.packages,
    )


@pytest.mark.parametrize(
    ("fields", "error", "field"),
    [
        ({"memory": -1}, ValueError, "memory"),
        ({"memory": -(2**63)}, ValueError, "memory"),
        ({"disk": -1}, ValueError, "disk"),
        ({"cpu": -1}, ValueError, "cpu"),
        ({"gpu": -(2**31)}, ValueError, "gpu"),
        ({"packages": ["numpy", "pandas>=>1"]}, ValueError, r"packages\[1\]"),
        ({"packages": [""]}, ValueError, r"packages\[0\]"),
    ],
    ids=[
        "negative memory",
        "int64 min memory",
        "negative disk",
        "negative cpu",
        "int32 min gpu",
        "bad requirement",
        "empty requirement",
    ],
)
def test_resource_request_from_proto_validates(fields, error, field):
    message = _over_the_wire(resources_pb2.ResourceRequest(**fields))
    with pytest.raises(error, match=field):
        ResourceRequest.from_proto(message)


GPUS = [
    Gpu(index=0),
    Gpu(index=1, uuid="GPU-5f3c", name="NVIDIA H200", memory_total=141 * 1024**3, memory_free=10),
    Gpu(index=INT32_MAX, uuid="u", name="n", memory_total=MAX_BYTES, memory_free=MAX_BYTES),
]


@pytest.mark.parametrize("gpu", GPUS, ids=["index only", "full", "maxima"])
def test_gpu_round_trips(gpu):
    message = gpu.to_proto()
    assert (message.index, message.uuid, message.name, message.memory_total, message.memory_free) == (
        gpu.index,
        gpu.uuid,
        gpu.name,
        gpu.memory_total,
        gpu.memory_free,
    )
    assert Gpu.from_proto(_over_the_wire(message)) == gpu


RESOURCES = [
    WorkerResources(),
    WorkerResources(
        cpu_total=4,
        cpu_available=3,
        memory_total=16 * 1024**3,
        memory_available=8 * 1024**3,
        disk_total=10**12,
        disk_free=10**11,
    ),
    WorkerResources(cpu_total=8, gpus=(GPUS[1], Gpu(index=0, memory_total=80, memory_free=80))),
    WorkerResources(
        cpu_total=INT32_MAX,
        cpu_available=INT32_MAX,
        memory_total=MAX_BYTES,
        memory_available=MAX_BYTES,
        disk_total=MAX_BYTES,
        disk_free=MAX_BYTES,
        gpus=(GPUS[2],),
    ),
]


@pytest.mark.parametrize("resources", RESOURCES, ids=["empty", "no gpus", "two gpus out of order", "maxima"])
def test_worker_resources_round_trip(resources):
    message = resources.to_proto()
    assert message.cpu_total == resources.cpu_total
    assert message.memory_available == resources.memory_available
    assert len(message.gpus) == len(resources.gpus)
    back = WorkerResources.from_proto(_over_the_wire(message))
    assert back == resources
    assert back.gpus == resources.gpus


_GPU_LISTS = st.lists(
    st.builds(
        Gpu,
        index=st.integers(0, INT32_MAX),
        uuid=st.text(max_size=8),
        name=st.text(max_size=8),
        memory_total=st.integers(0, MAX_BYTES),
        memory_free=st.integers(0, MAX_BYTES),
    ),
    max_size=4,
    unique_by=lambda gpu: gpu.index,
).map(tuple)


@given(
    st.builds(
        WorkerResources,
        cpu_total=st.integers(0, INT32_MAX),
        cpu_available=st.integers(0, INT32_MAX),
        memory_total=st.integers(0, MAX_BYTES),
        memory_available=st.integers(0, MAX_BYTES),
        disk_total=st.integers(0, MAX_BYTES),
        disk_free=st.integers(0, MAX_BYTES),
        gpus=_GPU_LISTS,
    )
)
def test_worker_resources_round_trip_property(resources):
    assert WorkerResources.from_proto(_over_the_wire(resources.to_proto())) == resources


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        (resources_pb2.WorkerResources(cpu_total=-1), "resources.cpu_total"),
        (resources_pb2.WorkerResources(cpu_available=-1), "resources.cpu_available"),
        (resources_pb2.WorkerResources(memory_total=-1), "resources.memory_total"),
        (resources_pb2.WorkerResources(memory_available=-1), "resources.memory_available"),
        (resources_pb2.WorkerResources(disk_total=-1), "resources.disk_total"),
        (resources_pb2.WorkerResources(disk_free=-1), "resources.disk_free"),
        (
            resources_pb2.WorkerResources(gpus=[resources_pb2.Gpu(index=0), resources_pb2.Gpu(index=0)]),
            "duplicate",
        ),
        (
            resources_pb2.WorkerResources(
                gpus=[resources_pb2.Gpu(index=1), resources_pb2.Gpu(index=0), resources_pb2.Gpu(index=1)]
            ),
            "duplicate",
        ),
        (resources_pb2.WorkerResources(gpus=[resources_pb2.Gpu(index=-1)]), "resources.gpus"),
        (resources_pb2.WorkerResources(gpus=[resources_pb2.Gpu(index=0, memory_total=-1)]), "resources.gpus"),
        (resources_pb2.WorkerResources(gpus=[resources_pb2.Gpu(index=0, memory_free=-1)]), "resources.gpus"),
    ],
    ids=[
        "negative cpu_total",
        "negative cpu_available",
        "negative memory_total",
        "negative memory_available",
        "negative disk_total",
        "negative disk_free",
        "duplicate gpu index",
        "duplicate gpu index not adjacent",
        "negative gpu index",
        "negative gpu memory_total",
        "negative gpu memory_free",
    ],
)
def test_worker_resources_from_proto_rejects(message, fragment):
    with pytest.raises(ValueError, match=fragment):
        WorkerResources.from_proto(_over_the_wire(message))


def test_worker_resources_validate_returns_itself_when_valid():
    resources = RESOURCES[2]
    assert resources.validate() is resources


@pytest.mark.parametrize(
    ("given_name", "canonical"),
    [
        ("Scikit_Learn", "scikit-learn"),
        ("NumPy", "numpy"),
        ("zope.interface", "zope-interface"),
        ("a__b--c..d", "a-b-c-d"),
        ("torch", "torch"),
    ],
    ids=["underscore and case", "case", "dot", "runs of separators", "already canonical"],
)
def test_worker_software_canonicalises_names(given_name, canonical):
    software = WorkerSoftware({given_name: "1.0"})
    assert dict(software.packages) == {canonical: "1.0"}
    assert WorkerSoftware.from_proto(software.to_proto()).packages == {canonical: "1.0"}


SOFTWARE = [
    WorkerSoftware(),
    WorkerSoftware({"numpy": "2.1.0", "torch": "2.1.0+cu121"}),
    WorkerSoftware(
        {"scikit-learn": "1.5.0"},
        {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"},
    ),
]


@pytest.mark.parametrize("software", SOFTWARE, ids=["empty", "packages", "packages and markers"])
def test_worker_software_round_trips(software):
    back = WorkerSoftware.from_proto(_over_the_wire(software.to_proto()))
    assert back == software
    assert hash(back) == hash(software)
    assert dict(back.packages) == dict(software.packages)
    assert dict(back.marker_environment) == dict(software.marker_environment)


def test_worker_software_to_proto_sorts_packages():
    message = WorkerSoftware({"zlib": "1", "attrs": "2", "numpy": "3"}).to_proto()
    assert [(p.name, p.version) for p in message.packages] == [("attrs", "2"), ("numpy", "3"), ("zlib", "1")]


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (WorkerSoftware({"Scikit_Learn": "1.5"}), WorkerSoftware({"scikit-learn": "1.5"})),
        (WorkerSoftware({"a": "1", "b": "2"}), WorkerSoftware([("b", "2"), ("a", "1")])),
        (
            WorkerSoftware({}, {"python_version": "3.11", "os_name": "posix"}),
            WorkerSoftware(marker_environment={"os_name": "posix", "python_version": "3.11"}),
        ),
        (WorkerSoftware(), WorkerSoftware({}, {})),
    ],
    ids=["canonical names", "mapping or pairs in any order", "marker order", "empty"],
)
def test_equal_software_is_equal_and_hash_equal(left, right):
    assert left == right
    assert hash(left) == hash(right)
    assert len({left, right}) == 1


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (WorkerSoftware({"numpy": "1.0"}), WorkerSoftware({"numpy": "2.0"})),
        (WorkerSoftware({"numpy": "1.0"}), WorkerSoftware({"scipy": "1.0"})),
        (WorkerSoftware({}, {"python_version": "3.11"}), WorkerSoftware({}, {"python_version": "3.12"})),
        (WorkerSoftware({"numpy": "1.0"}), WorkerSoftware()),
    ],
    ids=["version", "name", "marker", "missing package"],
)
def test_different_software_differs(left, right):
    assert left != right


def test_worker_software_is_immutable():
    software = WorkerSoftware({"numpy": "1.0"})
    with pytest.raises(AttributeError):
        software.packages = {}
    with pytest.raises(TypeError):
        software.packages["scipy"] = "1.0"
    with pytest.raises(TypeError):
        software.marker_environment["python_version"] = "3.11"
    assert dict(software.packages) == {"numpy": "1.0"}


def test_worker_software_copies_its_inputs():
    packages = {"numpy": "1.0"}
    markers = {"python_version": "3.11"}
    software = WorkerSoftware(packages, markers)
    packages["scipy"] = "1.0"
    markers["python_version"] = "3.12"
    assert dict(software.packages) == {"numpy": "1.0"}
    assert dict(software.marker_environment) == {"python_version": "3.11"}


_NAMES = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,10}[A-Za-z0-9])?", fullmatch=True)


@given(
    packages=st.dictionaries(_NAMES, st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}", fullmatch=True)),
    markers=st.dictionaries(st.sampled_from(["python_version", "sys_platform", "os_name"]), st.text()),
)
def test_worker_software_round_trip_property(packages, markers):
    software = WorkerSoftware(packages, markers)
    back = WorkerSoftware.from_proto(_over_the_wire(software.to_proto()))
    assert back == software
    assert hash(back) == hash(software)


@given(st.text(max_size=40), st.integers(1, INT32_MAX), st.text(alphabet="0123456789abcdef", max_size=64),
       st.text(max_size=20))  # fmt: skip
def test_workflow_ref_round_trips(name, version, source_hash, entrypoint):
    ref = WorkflowRef(name, version, source_hash, entrypoint)
    assert WorkflowRef.from_proto(_over_the_wire(ref.to_proto())) == ref


@given(st.text(max_size=40), st.text(max_size=200), st.text(max_size=200))
def test_execution_error_round_trips(type_, message, traceback):
    error = ExecutionError(type_, message, traceback)
    assert ExecutionError.from_proto(_over_the_wire(error.to_proto())) == error
