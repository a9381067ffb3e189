"""The served OpenAPI is the contract: schemathesis checks every answer against it.

Where test_fuzz_gateway only asks for "no 5xx, the error shape", this asks
that each answer's status is one the operation documents, its body matches
the documented schema, its content type is the documented one, and a wrong
method gets 405 with an ``Allow`` header. Bounded: a few examples per
operation, on one real server, in well under a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    allow_header_conformance,
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from flux.security import Role
from flux.testing import Cluster

# One process runs the whole module: its server (module-scoped) is started once, not once per
# pytest-xdist process that happens to draw one of its tests.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("openapi_conformance")]

WORKFLOWS = Path(__file__).with_name("workflows.py")
STREAM = ("GET", "/workers/{name}/connect")  # endless when it succeeds
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    allow_header_conformance,
]
EXAMPLES = settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _role(method: str, path: str) -> Role:
    client_actions = ("/pause", "/resume", "/forget")
    return Role.WORKER if path.startswith("/workers/") and not path.endswith(client_actions) else Role.CLIENT


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("conformance"))
    try:
        cluster.start_server("--grace-period", "300")
        cluster.register(WORKFLOWS)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def spec(server: Cluster):  # type: ignore[no-untyped-def]
    return schemathesis.openapi.from_url(f"{server.gateway_url}/openapi.json", timeout=10)


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        s.trust_env = False
        yield s


def _operations(with_input: bool = False) -> list[tuple[str, str]]:
    """Every operation but the stream (only those with parameters or a body, ``with_input``)."""
    from gateway.app import create_app

    paths = create_app().openapi()["paths"]
    return sorted(
        (method.upper(), path)
        for path, item in paths.items()
        for method, operation in item.items()
        if (method.upper(), path) != STREAM
        and (not with_input or operation.get("parameters") or operation.get("requestBody"))
    )


def _bounded(case) -> None:  # type: ignore[no-untyped-def]
    # A run with `wait` may hold the request up to an hour, and no worker runs here: keep it short.
    if (
        case.operation.path == "/workflows/{name}/run"
        and isinstance(case.body, dict)
        and case.body.get("wait")
    ):
        case.body["timeout"] = 0.2


MODES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode.value}")
    for method, path in _operations()
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    # Negative cases need an input to spoil.
    if mode is GenerationMode.POSITIVE or (method, path) in _operations(with_input=True)
]


@pytest.mark.parametrize(("method", "path", "mode"), MODES)
def test_every_answer_conforms_to_the_served_openapi(
    server: Cluster, spec, session, method: str, path: str, mode: GenerationMode
) -> None:
    operation = spec[path][method]
    headers = {"Authorization": f"Bearer {server.token(_role(method, path))}"}

    @EXAMPLES
    @given(case=operation.as_strategy(generation_mode=mode))
    def exercise(case) -> None:  # type: ignore[no-untyped-def]
        _bounded(case)
        case.call_and_validate(
            base_url=server.gateway_url, session=session, headers=headers, checks=CHECKS, timeout=15
        )

    exercise()


@pytest.mark.parametrize(("method", "path"), _operations(), ids=[f"{m} {p}" for m, p in _operations()])
def test_answers_without_a_token_conform_too(server: Cluster, spec, session, method: str, path: str) -> None:
    operation = spec[path][method]

    @settings(max_examples=2, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def exercise(case) -> None:  # type: ignore[no-untyped-def]
        _bounded(case)
        response = case.call_and_validate(
            base_url=server.gateway_url, session=session, checks=CHECKS, timeout=15
        )
        if path not in ("/healthz", "/metrics"):
            assert response.status_code == 401, (method, path, response.text[:200])

    exercise()
