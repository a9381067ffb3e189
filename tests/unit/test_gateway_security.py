"""Pure parts of the gateway's hardening: bearer parsing, the probe cache, the one error table,
the open-file arithmetic, the accept-failure log filter and the strict schemas."""

from __future__ import annotations

import logging

import grpc
import pytest
from pydantic import ValidationError

from flux.errors import (
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Unimplemented,
    from_grpc_code,
    from_http_status,
    status_of,
)
from flux.security import Role, bearer, plaintext_warning
from flux.v1 import control_pb2, resources_pb2
from gateway.security.auth import ACCEPTED_FOR, REFUSED_FOR, REMEMBERED, TokenCache, bearer_token
from gateway.security.connections import RESERVED_FDS, AcceptFailures, HttpLimits, fit_to_open_files
from gateway.wire import schema


@pytest.mark.parametrize(
    ("header", "token"),
    [
        pytest.param("Bearer abc", "abc", id="canonical"),
        pytest.param("bearer abc", "abc", id="lowercase"),
        pytest.param("BEARER   abc  ", "abc", id="uppercase, extra spaces"),
        pytest.param("Basic abc", None, id="another scheme"),
        pytest.param("Bearer", None, id="no token"),
        pytest.param("Bearer ", None, id="blank token"),
        pytest.param("abc", None, id="no scheme"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_bearer_token_takes_the_scheme_in_any_case(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BeArEr"])
def test_grpc_metadata_bearer_takes_the_scheme_in_any_case(scheme: str) -> None:
    assert bearer((("authorization", f"{scheme} tok"),)) == "tok"
    assert bearer((("authorization", "Basic tok"),)) == ""


def test_token_cache_remembers_by_role_for_a_while_and_stays_bounded() -> None:
    now = [0.0]
    cache = TokenCache(size=3, clock=lambda: now[0])
    cache.put(Role.CLIENT, "good", None, ACCEPTED_FOR)
    cache.put(Role.CLIENT, "bad", InvalidArgument("no"), REFUSED_FOR)
    assert cache.get(Role.CLIENT, "good") == (True, None)
    assert cache.get(Role.WORKER, "good") == (False, None)  # a token is checked per role
    known, refusal = cache.get(Role.CLIENT, "bad")
    assert known and isinstance(refusal, InvalidArgument)
    now[0] = REFUSED_FOR + 1  # refusals are forgotten sooner than acceptances
    assert cache.get(Role.CLIENT, "bad") == (False, None)
    assert cache.get(Role.CLIENT, "good") == (True, None)
    for i in range(5):
        cache.put(Role.WORKER, f"t{i}", None, ACCEPTED_FOR)
    assert cache.get(Role.CLIENT, "good") == (False, None)  # evicted, oldest first
    assert cache.get(Role.WORKER, "t4") == (True, None)
    assert REMEMBERED >= 1024


@pytest.mark.parametrize(
    ("status", "error", "code", "answered"),
    [
        pytest.param(400, InvalidArgument, "INVALID_ARGUMENT", 422, id="unreadable body"),
        pytest.param(404, NotFound, "NOT_FOUND", 404, id="unknown route"),
        pytest.param(405, Unimplemented, "UNIMPLEMENTED", 405, id="wrong method"),
        pytest.param(413, ResourceExhausted, "RESOURCE_EXHAUSTED", 413, id="body too large"),
        pytest.param(418, InvalidArgument, "INVALID_ARGUMENT", 422, id="other 4xx"),
        pytest.param(502, Unavailable, "UNAVAILABLE", 503, id="other 5xx"),
    ],
)
def test_http_layer_refusals_come_from_the_one_table(
    status: int, error: type, code: str, answered: int
) -> None:
    found = from_http_status(status, "why")
    assert type(found) is error and str(found) == "why"
    grpc_code, http_status = status_of(found)
    assert (grpc_code.name, http_status) == (code, answered)


def test_unimplemented_round_trips_through_the_table() -> None:
    assert isinstance(from_grpc_code(grpc.StatusCode.UNIMPLEMENTED, "no such rpc"), Unimplemented)


def test_plaintext_warning_only_off_loopback() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert plaintext_warning(host) == ""
    assert "without TLS on 0.0.0.0" in plaintext_warning("0.0.0.0")
    assert "--tls-cert" in plaintext_warning("10.0.0.5")


def test_the_connection_cap_leaves_the_core_its_descriptors(caplog: pytest.LogCaptureFixture) -> None:
    limits = HttpLimits(max_connections=1000)
    assert fit_to_open_files(limits, 65536) == limits
    with caplog.at_level(logging.WARNING, "flux.gateway"):
        fitted = fit_to_open_files(limits, 1024)
    assert fitted.max_connections == 1024 - RESERVED_FDS
    assert "lowered to 768" in caplog.text
    assert fit_to_open_files(limits, 100).max_connections == 16  # never nothing


def _accept_failure() -> logging.LogRecord:
    try:
        raise OSError(24, "Too many open files")
    except OSError as exc:
        info = (type(exc), exc, exc.__traceback__)
    return logging.LogRecord(
        "asyncio", logging.ERROR, __file__, 1, "socket.accept() out of system resource", (), info
    )


def test_accept_failures_are_one_line_then_a_count_a_minute() -> None:
    now = [0.0]
    quiet = AcceptFailures(clock=lambda: now[0])
    first = _accept_failure()
    assert quiet.filter(first) and first.exc_info is None and first.levelname == "WARNING"
    assert not any(quiet.filter(_accept_failure()) for _ in range(500))
    now[0] = 61.0
    later = _accept_failure()
    assert quiet.filter(later) and "(500 since the last report)" in later.getMessage()
    other = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "something else", (), None)
    assert quiet.filter(other)


def test_schemas_refuse_null_and_non_digit_int64() -> None:
    with pytest.raises(ValidationError):
        schema.RegisterWorkflowRequest.model_validate({"source": None})
    assert schema.RegisterWorkflowRequest.model_validate({"source": "x"}).to_json_dict() == {"source": "x"}
    execution = schema.model_of(control_pb2.Execution.DESCRIPTOR)  # created_at_ms is an int64
    for good in (8, "8589934592", "-1"):
        execution.model_validate({"created_at_ms": good})
    for bad in ("8Gi", "1e9", "", " 1", "1" * 21, None):
        with pytest.raises(ValidationError):
            execution.model_validate({"created_at_ms": bad})
    # Byte quantities also take the Python API's strings; their parser refuses a bad one by name.
    resources = schema.model_of(resources_pb2.WorkerResources.DESCRIPTOR)
    for good in (8, "8589934592", "8Gi", "8GB"):
        resources.model_validate({"memory_total": good})
    for bad in (None, 1.5, "x" * 41):
        with pytest.raises(ValidationError):
            resources.model_validate({"memory_total": bad})


def test_large_strings_convert_as_json_format_would_but_directly() -> None:
    from google.protobuf import json_format

    from flux.errors import InvalidArgument as Invalid
    from flux.v1 import control_pb2
    from gateway.wire import protojson
    from gateway.wire.protojson import DIRECT_STRING_CHARS

    body = {"filename": "big.py", "source": "é" * (DIRECT_STRING_CHARS + 1)}
    direct = protojson.from_dict(body, control_pb2.RegisterWorkflowRequest())
    assert direct == json_format.ParseDict(body, control_pb2.RegisterWorkflowRequest())
    for bad in ({"source": "\udc80" * (DIRECT_STRING_CHARS + 1)}, {"source": "\udc80"}):
        with pytest.raises(Invalid, match="source"):
            protojson.from_dict(bad, control_pb2.RegisterWorkflowRequest())
    with pytest.raises(Invalid, match="filename"):
        protojson.from_dict(
            {"filename": 7, "source": "x" * (DIRECT_STRING_CHARS + 1)}, control_pb2.RegisterWorkflowRequest()
        )


async def test_a_route_that_raises_something_else_answers_internal_in_the_same_shape() -> None:
    import httpx
    from fastapi import FastAPI

    from gateway.wire.errors import install

    app = FastAPI()
    install(app)

    @app.get("/broken")
    async def broken() -> None:
        raise KeyError("worker")

    # Starlette answers through the handler, then re-raises for the server's log: not ours to see here.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        answer = await client.get("/broken")
    assert answer.status_code == 500
    assert answer.json() == {
        "error": {
            "code": "INTERNAL",
            "message": "internal error (KeyError: 'worker'); the server's log has the details",
        }
    }
