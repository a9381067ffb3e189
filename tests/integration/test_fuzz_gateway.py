"""Hostile HTTP at the gateway: schemathesis over its served OpenAPI, plus hand-written edge cases.

Every answer must be a success or a refusal in the gateway's one error shape
(``{"error": {"code", "message"}}``), never a 5xx (the core is up throughout,
so not even 503), and well-formed work must keep flowing afterwards. The SSE
route is left out of schemathesis (a successful call streams forever) and is
probed by hand instead, over a raw socket where the input is not valid HTTP
for a well-behaved client (control bytes, non-ASCII header values).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from flux.security import Role
from flux.testing import Cluster
from gateway.app import create_app
from gateway.security.limits import MAX_BODY_BYTES

# One process runs the whole module: its server (module-scoped) is started once, not once per
# pytest-xdist process that happens to draw one of its tests.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("fuzz_gateway")]

WORKFLOWS = Path(__file__).with_name("workflows.py")
STREAM = ("GET", "/workers/{name}/connect")  # endless when it succeeds; see the hand-written cases
# Streams that never end by themselves when they succeed (test_streams.py covers them).
ENDLESS = {STREAM, ("GET", "/events")}
EXAMPLES = 25
FREE = {"cpu_total": 4, "cpu_available": 4, "memory_total": 8 << 30, "memory_available": 8 << 30}
ERROR_CODE = re.compile(r"^[A-Z][A-Z_]*$")


def _operations() -> dict[tuple[str, str], bool]:
    """Each route but the stream, and whether it takes any input that can be made invalid."""
    # The app's own spec, built without a core: every route is fuzzed, including ones added later.
    spec = create_app().openapi()
    return {
        (method.upper(), path): bool(operation.get("parameters") or operation.get("requestBody"))
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if (method.upper(), path) not in ENDLESS
    }


OPERATIONS = sorted(_operations())
IDS = [f"{method} {path}" for method, path in OPERATIONS]
# Negative cases need an input to spoil: GET /workers, /healthz, /metrics and /status take none.
MODES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode}")
    for (method, path), has_input in sorted(_operations().items())
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if has_input or mode is GenerationMode.POSITIVE
]


def role_for(path: str) -> Role:
    """The token a well-behaved caller sends: the worker token on /workers/*, the API token elsewhere."""
    return Role.WORKER if path.startswith("/workers/") else Role.CLIENT


def bearer(cluster: Cluster, path: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {cluster.token(role_for(path))}"}


def assert_refusal_shape(status: int, body: bytes, what: str) -> None:
    assert status < 500, f"{what} answered {status}: {body[:500]!r}"
    if 400 <= status < 500:
        error = json.loads(body)
        assert set(error) == {"error"} and set(error["error"]) == {"code", "message"}, (what, error)
        assert ERROR_CODE.match(error["error"]["code"]), (what, error)
        assert isinstance(error["error"]["message"], str) and error["error"]["message"], (what, error)


def assert_fuzzed_answer(response, what: str) -> None:  # type: ignore[no-untyped-def]
    assert_refusal_shape(response.status_code, response.content, what)


class Target:
    """What the fuzzer may aim at besides random values: a registered worker and a real execution."""

    def __init__(self, http: httpx.Client):
        answer = http.post("/workers/register", json={"name": "fuzz-target", "resources": FREE})
        assert answer.status_code == 200, answer.text
        self.worker, self.session = "fuzz-target", answer.json()["session_token"]
        run = http.post("/workflows/echo/run", json={"input": "target"})
        assert run.status_code == 202, run.text
        self.execution_id = run.json()["execution_id"]


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("fuzz-gateway"))
    try:
        # A worker that never opens its stream is forgotten after the grace period; a long one keeps
        # the registered targets below in place for the whole module, so pinned cases get past NOT_FOUND.
        cluster.start_server("--ack-deadline", "2", "--grace-period", "300", "--safety-tick", "1")
        cluster.register(WORKFLOWS)
        yield cluster
    finally:
        cluster.close()


def _authorize(cluster: Cluster):  # type: ignore[no-untyped-def]
    def hook(request: httpx.Request) -> None:
        request.headers.setdefault("Authorization", f"Bearer {cluster.token(role_for(request.url.path))}")

    return hook


@pytest.fixture(scope="module")
def http(fuzz_cluster: Cluster) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=fuzz_cluster.gateway_url,
        timeout=20,
        trust_env=False,
        event_hooks={"request": [_authorize(fuzz_cluster)]},
    ) as client:
        yield client


@pytest.fixture(scope="module")
def target(http: httpx.Client) -> Target:
    return Target(http)


@pytest.fixture(scope="module")
def schema(fuzz_cluster: Cluster):  # type: ignore[no-untyped-def]
    loaded = schemathesis.openapi.from_url(
        f"{fuzz_cluster.gateway_url}/openapi.json", headers=bearer(fuzz_cluster, "/openapi.json"), timeout=10
    )
    served = {(op.method.upper(), op.path) for op in (r.ok() for r in loaded.get_all_operations())}
    assert served == {*OPERATIONS, *ENDLESS}, "the served spec differs from the app's"
    return loaded


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        s.trust_env = False
        yield s


def _bounded(case) -> None:  # type: ignore[no-untyped-def]
    # A run with `wait` holds the request for up to its `timeout` (3600 s allowed) and no worker
    # runs anything during the fuzzing, so cap a valid wait to keep every call short. Invalid ones stay.
    body = case.body
    if case.operation.path == "/workflows/{name}/run" and isinstance(body, dict) and body.get("wait") is True:
        timeout = body.get("timeout", 60.0)
        if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0.2:
            body["timeout"] = 0.2


def _strategy(operation, mode: GenerationMode, target: Target):  # type: ignore[no-untyped-def]
    random_cases = operation.as_strategy(generation_mode=mode)
    if mode is GenerationMode.NEGATIVE:
        return random_cases  # pinning valid values could leave nothing to make invalid
    names = set(re.findall(r"{(\w+)}", operation.path))
    worker_route = operation.path.startswith("/workers/")
    known = {"name": target.worker if worker_route else "echo", "execution_id": target.execution_id}
    pinned = {key: value for key, value in known.items() if key in names}
    if not pinned:
        return random_cases
    headers = {"x-flux-session": target.session} if worker_route else None
    # Half the cases aim at a real worker (with its session), workflow or execution, past NOT_FOUND.
    return st.one_of(random_cases, operation.as_strategy(mode, path_parameters=pinned, headers=headers))


FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize(("method", "path", "mode"), MODES)
def test_schema_fuzzing_with_valid_tokens_never_5xx(
    fuzz_cluster: Cluster, schema, session, target: Target, method: str, path: str, mode: GenerationMode
) -> None:
    operation = schema[path][method]
    auth = bearer(fuzz_cluster, path)

    @FUZZ
    @given(case=_strategy(operation, mode, target))
    def exercise(case) -> None:  # type: ignore[no-untyped-def]
        _bounded(case)
        response = case.call(base_url=fuzz_cluster.gateway_url, session=session, headers=auth, timeout=15)
        assert_fuzzed_answer(response, f"{method} {response.request.url}")

    exercise()


BAD_AUTH = {
    "missing": None,
    "garbage": "garbage",
    "bearer garbage": "Bearer not-a-token",
    "empty bearer": "Bearer",
    "huge": "Bearer " + "x" * 20_000,
    "wrong role": "wrong-role",
}


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=IDS)
def test_schema_fuzzing_without_valid_tokens_is_refused(
    fuzz_cluster: Cluster, schema, session, method: str, path: str
) -> None:
    operation = schema[path][method]
    other = Role.CLIENT if role_for(path) is Role.WORKER else Role.WORKER

    @FUZZ
    @given(case=operation.as_strategy(), auth=st.sampled_from(sorted(BAD_AUTH)))
    def exercise(case, auth: str) -> None:  # type: ignore[no-untyped-def]
        _bounded(case)
        value = BAD_AUTH[auth]
        if value == "wrong-role":
            value = f"Bearer {fuzz_cluster.token(other)}"
        headers = {"Authorization": value} if value is not None else None
        response = case.call(base_url=fuzz_cluster.gateway_url, session=session, headers=headers, timeout=15)
        what = f"{method} {response.request.url} with {auth} auth"
        assert_fuzzed_answer(response, what)
        # Open by design: the health check (load balancers probe it) and the metrics (Prometheus scrapes them).
        if path not in ("/healthz", "/metrics"):
            assert response.status_code >= 400, f"{what} was let through: {response.status_code}"

    exercise()


# ------------------------------------------------------------------ by hand, over a raw socket


def raw_request(
    url: str, method: str, target: str, headers: list[tuple[str, str | bytes]], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request written byte for byte (no client-side header checks), read to the server's close."""
    parts = urlsplit(url)
    head = f"{method} {target} HTTP/1.1\r\nHost: {parts.hostname}\r\nConnection: close\r\n".encode()
    if body:
        headers = [*headers, ("Content-Length", str(len(body)))]
    for name, value in headers:
        head += name.encode() + b": " + (value if isinstance(value, bytes) else value.encode()) + b"\r\n"
    received = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head + b"\r\n" + body)
        while chunk := sock.recv(1 << 16):
            received += chunk
    status_line, _, rest = received.partition(b"\r\n")
    header_block, _, payload = rest.partition(b"\r\n\r\n")
    fields = dict(line.decode("latin-1").split(": ", 1) for line in header_block.split(b"\r\n") if line)
    return int(status_line.split()[1]), {k.lower(): v for k, v in fields.items()}, payload


@pytest.fixture(scope="module")
def holder(http: httpx.Client) -> tuple[str, str]:
    """A registered, unconnected worker: requests naming it get past NOT_FOUND."""
    answer = http.post("/workers/register", json={"name": "holder", "resources": FREE})
    assert answer.status_code == 200, answer.text
    return "holder", answer.json()["session_token"]


W, A, S = "worker", "api", "session"  # stand for the worker token, the API token, holder's session token

CONNECT_CASES = [
    # name, query, headers, status, code
    pytest.param("ghost", "", [("Authorization", W), ("X-Flux-Session", "x")], 404, "NOT_FOUND", id="unknown name"),
    pytest.param("holder", "", [("X-Flux-Session", S)], 401, "UNAUTHENTICATED", id="no authorization"),
    pytest.param("holder", "", [("Authorization", "Bearer nope"), ("X-Flux-Session", S)], 401, "UNAUTHENTICATED", id="garbage bearer"),
    pytest.param("holder", "", [("Authorization", "nope"), ("X-Flux-Session", S)], 401, "UNAUTHENTICATED", id="no scheme"),
    pytest.param("holder", "", [("Authorization", b"Bearer \xe9\xff"), ("X-Flux-Session", S)], 401, "UNAUTHENTICATED", id="non-ascii bearer"),
    pytest.param("holder", "", [("Authorization", "Bearer " + "x" * 100_000), ("X-Flux-Session", S)], 431, "RESOURCE_EXHAUSTED", id="100 KiB bearer"),
    pytest.param("holder", "", [("Authorization", "Bearer " + "x" * 10_000), ("X-Flux-Session", S)], 401, "UNAUTHENTICATED", id="10 KiB bearer"),
    pytest.param("holder", "", [("Authorization", A), ("X-Flux-Session", S)], 403, "PERMISSION_DENIED", id="api token"),
    pytest.param("holder", "", [("Authorization", W)], 401, "UNAUTHENTICATED", id="no session"),
    pytest.param("holder", "", [("Authorization", W), ("X-Flux-Session", "wrong")], 403, "PERMISSION_DENIED", id="wrong session"),
    pytest.param("holder", "", [("Authorization", W), ("X-Flux-Session", "s" * 100_000)], 431, "RESOURCE_EXHAUSTED", id="100 KiB session header"),
    pytest.param("holder", "", [("Authorization", W), ("X-Flux-Session", "s" * 20_000)], 403, "PERMISSION_DENIED", id="20 KiB session header"),
    pytest.param("holder", "session_token=" + "s" * 60_000, [("Authorization", W)], 431, "RESOURCE_EXHAUSTED", id="60 KiB query token"),
    # ?session_token= is no longer read: the session header is missing.
    pytest.param("holder", "session_token=" + "s" * 20_000, [("Authorization", W)], 401, "UNAUTHENTICATED", id="20 KiB query token"),
    pytest.param("holder", "session_token=%00%2F%20", [("Authorization", W)], 401, "UNAUTHENTICATED", id="escaped NUL in query"),
    pytest.param("holder", "session_token=x&session_token=y&" + "a=1&" * 5000, [("Authorization", W)], 401, "UNAUTHENTICATED", id="5000 junk params"),
    pytest.param("holder", "ticket=a&ticket=b", [], 401, "UNAUTHENTICATED", id="repeated ticket"),
    pytest.param("holder", "ticket=a&ticket=", [], 401, "UNAUTHENTICATED", id="repeated ticket, one blank"),
    pytest.param("holder", "ticket=a&ticket=b", [("Authorization", W), ("X-Flux-Session", S)], 401, "UNAUTHENTICATED", id="repeated ticket beside headers"),
    pytest.param("%00%ff", "", [("Authorization", W), ("X-Flux-Session", "x")], 404, "NOT_FOUND", id="NUL and bad UTF-8 in name"),
    pytest.param("n" * 64, "", [("Authorization", W), ("X-Flux-Session", "x")], 422, "INVALID_ARGUMENT", id="64-char name"),
    pytest.param("n" * 5000, "", [("Authorization", W), ("X-Flux-Session", "x")], 422, "INVALID_ARGUMENT", id="5000-char name"),
    pytest.param("holder", "", [("Authorization", W), ("X-Flux-Session", b"\xe9")], 403, "PERMISSION_DENIED", id="latin-1 session header"),
    pytest.param("holder", "session_token=%C3%A9", [("Authorization", W)], 401, "UNAUTHENTICATED", id="non-ascii query token"),
    pytest.param("holder", "session_token=%ff", [("Authorization", W)], 401, "UNAUTHENTICATED", id="bad UTF-8 query token"),
]  # fmt: skip


def _concrete(cluster: Cluster, holder: tuple[str, str], headers: list) -> list:  # type: ignore[type-arg]
    tokens = {
        W: f"Bearer {cluster.token(Role.WORKER)}",
        A: f"Bearer {cluster.token(Role.CLIENT)}",
        S: holder[1],
    }
    return [(key, tokens.get(value, value) if isinstance(value, str) else value) for key, value in headers]


@pytest.mark.parametrize(("name", "query", "headers", "status", "code"), CONNECT_CASES)
def test_hostile_connect_requests_are_refused_in_the_error_shape(
    fuzz_cluster: Cluster, holder, name: str, query: str, headers: list, status: int, code: str
) -> None:
    target = f"/workers/{name}/connect" + (f"?{query}" if query else "")
    got, _, body = raw_request(
        fuzz_cluster.gateway_url, "GET", target, _concrete(fuzz_cluster, holder, headers)
    )
    assert_refusal_shape(got, body, target[:80])
    assert (got, json.loads(body)["error"]["code"]) == (status, code), body[:300]


@pytest.mark.parametrize(
    ("path", "body", "session"),
    [
        pytest.param("/workers/holder/resources", b"{}", b"\xe9", id="resources"),
        pytest.param("/workers/holder/claim/e1", b'{"generation": 1}', b"\xe9", id="claim"),
        pytest.param(
            "/workers/register", '{"name": "holder", "session_token": "\u00e9"}'.encode(), None, id="register"
        ),
    ],
)
def test_non_ascii_session_tokens_are_refused_on_every_worker_route(
    fuzz_cluster: Cluster, holder, path: str, body: bytes, session: bytes | None
) -> None:
    headers = [("Authorization", W), ("Content-Type", "application/json")]
    headers += [("X-Flux-Session", session)] if session is not None else []
    got, _, answer = raw_request(
        fuzz_cluster.gateway_url, "POST", path, _concrete(fuzz_cluster, holder, headers), body
    )
    assert_refusal_shape(got, answer, path)


def test_malformed_http_is_refused_by_the_server_before_the_app(fuzz_cluster: Cluster, holder) -> None:
    """What uvicorn's parser refuses never reaches the app, so it cannot carry our error shape: a bare 400."""
    worker = ("Authorization", f"Bearer {fuzz_cluster.token(Role.WORKER)}")
    api = ("Authorization", f"Bearer {fuzz_cluster.token(Role.CLIENT)}")
    for what, method, target, headers in [
        (
            "control byte in a header",
            "GET",
            "/workers/holder/connect",
            [worker, ("X-Flux-Session", b"a\x01")],
        ),
        ("Content-Length beyond 64 bits", "POST", "/workflows/echo/run", [api, ("Content-Length", "9" * 30)]),
        ("negative Content-Length", "POST", "/workflows/echo/run", [api, ("Content-Length", "-1")]),
    ]:
        status, fields, _ = raw_request(fuzz_cluster.gateway_url, method, target, headers)
        assert status == 400 and fields["content-type"].startswith("text/plain"), what
    # A head over the cap is cut before the parser takes it, in the error shape.
    target = "/workers/holder/connect?session_token=" + "x" * (1 << 20)
    status, _, body = raw_request(fuzz_cluster.gateway_url, "GET", target, [worker])
    assert (status, json.loads(body)["error"]["code"]) == (431, "RESOURCE_EXHAUSTED")
    status, _, body = raw_request(fuzz_cluster.gateway_url, "GET", "/healthz", [])
    assert status == 200 and json.loads(body)["status"] == "SERVING"


def test_unknown_routes_and_methods_answer_in_the_error_shape(http: httpx.Client) -> None:
    for method, path, status, code in [
        ("GET", "/no/such/route", 404, "NOT_FOUND"),
        ("GET", "/workers/holder", 404, "NOT_FOUND"),
        # Codes are gRPC status names from flux.errors, even for HTTP-only refusals.
        ("DELETE", "/workers", 405, "UNIMPLEMENTED"),
        ("PUT", "/workflows", 405, "UNIMPLEMENTED"),
        ("POST", "/workers/holder/connect", 405, "UNIMPLEMENTED"),
        ("GET", "/workers/register", 405, "UNIMPLEMENTED"),
    ]:
        answer = http.request(method, path)
        assert_refusal_shape(answer.status_code, answer.content, f"{method} {path}")
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (method, path)
    assert http.request("DELETE", "/workers").headers["allow"] == "GET"
    # Starlette's slash redirect, not a refusal.
    assert http.get("/workers/", follow_redirects=False).status_code == 307


def test_bodies_that_do_not_parse_are_refused_in_the_error_shape(http: httpx.Client) -> None:
    json_type = {"content-type": "application/json"}
    # Every one is the caller's bad input: INVALID_ARGUMENT with the table's status, whichever
    # layer (JSON decoder, FastAPI, the models) noticed it.
    big = b'{"input": "' + b"x" * (300 * 1024) + b'"'  # decoded on a thread (over 256 KiB), then refused
    for what, content in [
        ("truncated JSON", b'{"input": '),
        ("nested 100000 deep", b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("5000-digit integer", b'{"input": 1' + b"0" * 5000 + b"}"),
        ("invalid UTF-8", b'{"input": "\xff"}'),
        ("top-level array", b"[1, 2]"),
        ("large truncated JSON", big),
    ]:
        answer = http.post("/workflows/echo/run", content=content, headers=json_type)
        assert_refusal_shape(answer.status_code, answer.content, what)
        assert (answer.status_code, answer.json()["error"]["code"]) == (422, "INVALID_ARGUMENT"), what


def test_bodies_over_the_limit_get_413(fuzz_cluster: Cluster, http: httpx.Client) -> None:
    def refused(answer: httpx.Response) -> None:
        assert answer.status_code == 413, answer.text[:300]
        assert answer.json()["error"]["code"] == "RESOURCE_EXHAUSTED"

    json_type = {"content-type": "application/json"}
    # Declared by Content-Length: refused from the header alone, before any body byte is read.
    api = ("Authorization", f"Bearer {fuzz_cluster.token(Role.CLIENT)}")
    declared = [api, ("Content-Type", "application/json"), ("Content-Length", str(MAX_BODY_BYTES + 1))]
    status, _, body = raw_request(fuzz_cluster.gateway_url, "POST", "/workflows/echo/run", declared)
    assert (status, json.loads(body)["error"]["code"]) == (413, "RESOURCE_EXHAUSTED")
    refused(http.post("/workflows/echo/run", content=b"x" * (MAX_BODY_BYTES + 1), headers=json_type))
    # Chunked: no length up front, refused once the bytes read cross the limit.
    mib = b"x" * (1 << 20)
    for path in ("/workflows/echo/run", "/workers/register", "/workflows"):
        chunks = (mib for _ in range(MAX_BODY_BYTES // len(mib) + 1))
        answer = http.post(path, content=chunks, headers=json_type)
        refused(answer)
        assert answer.headers["connection"] == "close"  # the unread rest must not reach the next request
    # Just under the limit the body is read, and the core refuses the oversized input itself.
    near = b'{"input": "' + b"x" * (MAX_BODY_BYTES - 100) + b'"}'
    answer = http.post("/workflows/echo/run", content=near, headers=json_type)
    refused(answer)
    assert "input_json" in answer.json()["error"]["message"]
    assert http.get("/healthz").json()["status"] == "SERVING"


def test_well_formed_work_still_flows_after_the_fuzzing(fuzz_cluster: Cluster, http: httpx.Client) -> None:
    # Last in this module: the same server has taken every request above.
    assert http.get("/healthz").json()["status"] == "SERVING"
    fuzz_cluster.start_worker("steady")
    done = fuzz_cluster.run("echo", 1)
    assert json.loads(done.output_json) == {"input": 1, "worker": "steady"}
    over_http = http.post("/workflows/echo/run", json={"input": 2, "wait": True, "timeout": 20})
    assert over_http.status_code == 200, over_http.text
    assert json.loads(over_http.json()["output_json"]) == {"input": 2, "worker": "steady"}
