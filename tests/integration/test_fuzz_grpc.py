"""Hostile input over gRPC: random protobuf messages to every rpc never crash or stall the server.

Every answer must be a success or a refusal (INVALID_ARGUMENT and friends),
never INTERNAL or UNKNOWN, and well-formed work must keep flowing afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flux.security import Role
from flux.testing import Cluster
from flux.v1 import control_pb2, worker_pb2

# One process runs the whole module: its server (module-scoped) is started once, not once per
# pytest-xdist process that happens to draw one of its tests.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("fuzz_grpc")]

WORKFLOWS = Path(__file__).with_name("workflows.py")
REFUSALS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,  # a stream that legitimately waits (Connect, Watch)
}

# Values that probe edges: extremes, empties, unicode, control characters, near-valid names.
TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "w1", "echo", "bad name!", "\x00", "é" * 70, "a" * 300, "{}", "null", "[1,", "8GB"]),
)
SCALARS = {
    FieldDescriptor.TYPE_INT32: st.integers(-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: st.integers(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: st.integers(0, 2**64 - 1),
    FieldDescriptor.TYPE_UINT32: st.integers(0, 2**32 - 1),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_STRING: TEXT,
    FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=True),
}


def message_values(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[dict]:
    fields = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value = st.dictionaries(TEXT, TEXT, max_size=3)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth >= 3:
                continue
            value = message_values(field.message_type, depth + 1)
        elif field.type == FieldDescriptor.TYPE_ENUM:
            value = st.integers(-1, 8)
        else:
            value = SCALARS[field.type]
        if field.is_repeated and not (
            field.message_type is not None and field.message_type.GetOptions().map_entry
        ):
            value = st.lists(value, max_size=3)
        fields[field.name] = st.one_of(st.none(), value)
    return st.fixed_dictionaries({}, optional=fields)


def build(cls, values: dict):  # type: ignore[no-untyped-def]
    message = cls()
    for name, value in values.items():
        if value is None:
            continue
        field = cls.DESCRIPTOR.fields_by_name[name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            getattr(message, name).update(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.is_repeated:
                for item in value:
                    getattr(message, name).append(build(GetMessageClass(field.message_type), item))
            else:
                getattr(message, name).CopyFrom(build(GetMessageClass(field.message_type), value))
        elif field.is_repeated:
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)
    return message


def rpcs() -> Iterator[tuple[str, str, type, bool]]:
    for module, service in ((worker_pb2, "WorkerService"), (control_pb2, "ControlService")):
        for method in module.DESCRIPTOR.services_by_name[service].methods:
            # "both": a stream of requests too (WorkerCalls); each example sends one message on it.
            streaming = "both" if method.client_streaming else method.server_streaming
            yield service, method.name, GetMessageClass(method.input_type), streaming


RPCS = list(rpcs())


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("fuzz"))
    try:
        cluster.start_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
        cluster.register(WORKFLOWS)
        cluster.start_worker("steady")
        yield cluster
    finally:
        cluster.close()


@pytest.mark.parametrize(
    ("service", "method", "request_type", "streaming"), RPCS, ids=[f"{s}.{m}" for s, m, *_ in RPCS]
)
def test_random_messages_get_an_answer_or_a_refusal(
    fuzz_cluster: Cluster, service, method, request_type, streaming
):
    channel = fuzz_cluster.channel(Role.WORKER if service == "WorkerService" else Role.CLIENT)
    path = f"/flux.v1.{service}/{method}"
    kind = {"both": channel.stream_stream, True: channel.unary_stream, False: channel.unary_unary}
    call = kind[streaming](
        path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=lambda b: b
    )

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(message_values(request_type.DESCRIPTOR))
    def exercise(values: dict) -> None:
        request = build(request_type, values)
        try:
            if streaming:
                stream = call(iter([request]) if streaming == "both" else request, timeout=0.5)
                next(stream, None)
                stream.cancel()
            else:
                call(request, timeout=5)
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.CANCELLED and streaming:
                code = grpc.StatusCode.OK  # we cancelled it after reading the first event
        assert code in REFUSALS, f"{path} answered {code} to {request!r}"

    try:
        exercise()
    finally:
        channel.close()
    # Dispatch of well-formed work keeps flowing after the barrage.
    done = fuzz_cluster.run("echo", method)
    assert json.loads(done.output_json) == {"input": method, "worker": "steady"}


def test_raw_garbage_bytes_are_refused(fuzz_cluster: Cluster) -> None:
    channel = fuzz_cluster.channel(Role.CLIENT)
    call = channel.unary_unary(
        "/flux.v1.ControlService/RunWorkflow",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    for garbage in (b"\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x08" * 50):
        with pytest.raises(grpc.RpcError) as info:
            call(garbage, timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    channel.close()
    assert fuzz_cluster.run("echo", "after garbage").state == control_pb2.EXECUTION_STATE_COMPLETED


def test_raw_garbage_bytes_opening_a_dispatch_stream_are_refused(fuzz_cluster: Cluster) -> None:
    """Connect writes with context.write (a coroutine handler): the decode guard wraps it as one."""
    channel = fuzz_cluster.channel(Role.WORKER)
    connect = channel.unary_stream(
        "/flux.v1.WorkerService/Connect",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    for garbage in (b"\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f"):
        with pytest.raises(grpc.RpcError) as info:
            list(connect(garbage, timeout=5))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
        assert "not a valid protobuf message" in (info.value.details() or "")
    channel.close()
    assert fuzz_cluster.run("echo", "after garbage").state == control_pb2.EXECUTION_STATE_COMPLETED
