"""The SSE transport's error story and the gateway's JSON mapping, without a server."""

from __future__ import annotations

import json

import pytest

from flux.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from flux.v1 import worker_pb2
from flux.worker.sse_transport import _event, error_from_response
from flux.worker.transport import Cancel, Connected, Dispatch, Heartbeat
from gateway.wire import protojson, schema


def body(code: str, message: str = "why") -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


@pytest.mark.parametrize(
    ("status", "content", "expected"),
    [
        pytest.param(401, body("UNAUTHENTICATED"), Unauthenticated, id="401"),
        pytest.param(403, body("PERMISSION_DENIED"), PermissionDenied, id="403"),
        pytest.param(404, body("NOT_FOUND"), NotFound, id="404"),
        pytest.param(409, body("ALREADY_EXISTS"), AlreadyExists, id="409 name held"),
        pytest.param(409, body("FAILED_PRECONDITION"), FailedPrecondition, id="409 stale generation"),
        pytest.param(409, b"", FailedPrecondition, id="409 without a body"),
        pytest.param(413, body("RESOURCE_EXHAUSTED"), ResourceExhausted, id="413"),
        pytest.param(422, body("INVALID_ARGUMENT"), InvalidArgument, id="422"),
        pytest.param(422, b'{"detail": []}', InvalidArgument, id="422 foreign body"),
        pytest.param(404, b"<html>proxy page</html>", NotFound, id="404 not JSON"),
        pytest.param(405, body("UNIMPLEMENTED"), Unimplemented, id="405"),
        pytest.param(405, body("METHOD_NOT_ALLOWED"), Unimplemented, id="405 from an older gateway"),
        pytest.param(500, b"Internal Server Error", Unavailable, id="500"),
        pytest.param(502, b"bad gateway", Unavailable, id="502 from a proxy"),
        pytest.param(503, body("UNAVAILABLE"), Unavailable, id="503"),
    ],
)
def test_http_refusals_map_back_to_domain_errors(status: int, content: bytes, expected: type) -> None:
    error = error_from_response(status, content)
    assert type(error) is expected
    assert str(error)


def test_events_parse_from_their_json_data() -> None:
    scheduled = worker_pb2.ExecutionScheduled(execution_id="e", attempt=2, generation=7, input_json="1")
    scheduled.workflow.name, scheduled.requests.cpu = "wf", 2
    event = _event("execution_scheduled", protojson.to_json(scheduled))
    assert isinstance(event, Dispatch)
    assert (event.execution_id, event.attempt, event.generation, event.requests.cpu) == ("e", 2, 7, 2)
    cancelled = _event("execution_cancelled", '{"execution_id": "e", "generation": "7", "reason": "r"}')
    assert cancelled == Cancel("e", 7, "r")
    hello = _event("connected", '{"server_id": "s", "held_execution_ids": ["a"], "added_later": 1}')
    assert hello == Connected("s", {"a": 0})  # an older server: ids without generations
    hello = _event(
        "connected",
        '{"server_id": "s", "held_execution_ids": ["a", "b"],'
        ' "held": [{"execution_id": "a", "generation": "3"}, {"execution_id": "b", "generation": "1"}]}',
    )
    assert hello == Connected("s", {"a": 3, "b": 1})
    assert _event("ping", "{}") == Heartbeat()
    assert _event("something_new", "{}") is None


def test_json_mapping_names_fields_as_the_proto_does_and_prints_defaults() -> None:
    out = protojson.to_dict(worker_pb2.ExecutionCancelled(execution_id="e", generation=3))
    assert out == {"execution_id": "e", "generation": "3", "reason": "", "preempted": False}
    with pytest.raises(InvalidArgument, match="cpu_total"):
        protojson.from_dict({"resources": {"cpu_total": "x"}}, worker_pb2.RegisterRequest())
    with pytest.raises(InvalidArgument, match="JSON object"):
        protojson.from_dict([1], worker_pb2.RegisterRequest())


def test_body_models_leave_out_what_the_path_and_header_carry() -> None:
    assert set(schema.ClaimBody.model_fields) == {"generation"}
    assert "name" not in schema.ReportResourcesBody.model_fields
    assert "session_token" not in schema.CompleteBody.model_fields
    assert set(schema.RegisterRequest.model_fields) == {
        f.name for f in worker_pb2.RegisterRequest.DESCRIPTOR.fields
    }
