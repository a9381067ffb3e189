"""The HTTP/SSE gateway end to end: a real server (core and uvicorn) on 127.0.0.1:0, real HTTP clients.

Workers here are hand-driven over HTTP (curl, or httpx with httpx-sse), so each
test sees the exact frames and statuses a plain-HTTP worker would.
"""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from httpx_sse import ServerSentEvent, connect_sse

from flux.security import Role
from flux.testing import Cluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.transports("sse")]

FREE = {"cpu_total": 4, "cpu_available": 4, "memory_total": 8 << 30, "memory_available": 8 << 30}
BUSY = {**FREE, "cpu_available": 0}


def authorized(cluster: Cluster, base_url: str) -> httpx.Client:
    """An HTTP client that sends the worker token on worker routes and the API token elsewhere."""

    def authorize(request: httpx.Request) -> None:
        role = Role.WORKER if request.url.path.startswith("/workers/") else Role.CLIENT
        request.headers.setdefault("Authorization", f"Bearer {cluster.token(role)}")

    return httpx.Client(base_url=base_url, timeout=10, trust_env=False, event_hooks={"request": [authorize]})


@pytest.fixture
def http(cluster: Cluster) -> Iterator[httpx.Client]:
    with authorized(cluster, cluster.gateway_url) as client:
        yield client


def register(http: httpx.Client, name: str, resources: dict = FREE) -> str:
    answer = http.post("/workers/register", json={"name": name, "resources": resources})
    assert answer.status_code == 200, answer.text
    return answer.json()["session_token"]


class Stream:
    """One SSE connection read by httpx-sse; every read is bounded by the read timeout."""

    def __init__(self, http: httpx.Client, name: str, token: str, read_timeout: float = 10):
        self._context = connect_sse(
            http, "GET", f"/workers/{name}/connect",
            headers={"X-Flux-Session": token}, timeout=httpx.Timeout(5, read=read_timeout),
        )  # fmt: skip
        self.source = self._context.__enter__()
        assert self.source.response.status_code == 200, self.source.response.read()
        self._events = self.source.iter_sse()
        self.seen: list[ServerSentEvent] = []

    def next(self, *, skip_pings: bool = True) -> ServerSentEvent:
        for event in self._events:
            self.seen.append(event)
            if not (skip_pings and event.event == "ping"):
                return event
        raise AssertionError("the stream ended")

    def close(self) -> None:
        self._context.__exit__(None, None, None)


def data(event: ServerSentEvent) -> dict:
    value = json.loads(event.data)
    assert isinstance(value, dict)
    return value


def connected(http: httpx.Client, name: str) -> bool:
    return any(w["name"] == name and w["connected"] for w in http.get("/workers").json()["workers"])


def test_curl_sees_dispatch_and_leaving_ends_the_core_stream_at_once(cluster: Cluster, http) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    token = register(http, "curl-worker")
    process = subprocess.Popen(
        [curl, "-sN", "-H", f"X-Flux-Session: {token}", "-H", f"Authorization: Bearer {cluster.token(Role.WORKER)}", f"{cluster.gateway_url}/workers/curl-worker/connect"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in process.stdout], daemon=True).start()  # type: ignore[union-attr]

    def line_after(prefix: str) -> str:
        while True:
            line = lines.get(timeout=10)
            if line.startswith(prefix):
                return lines.get(timeout=10)  # the frame's next line

    try:
        assert line_after("id: 1") == "event: connected"
        execution = http.post("/workflows/echo/run", json={"input": "via curl"}).json()
        assert line_after("event: execution_scheduled").startswith("data: ")
        assert eventually(lambda: connected(http, "curl-worker"), timeout=5)
    finally:
        process.kill()
        process.wait(timeout=10)
    dropped = time.monotonic()
    eventually(
        lambda: not connected(http, "curl-worker"), timeout=5, interval=0.02, what="the core stream to end"
    )
    assert time.monotonic() - dropped < 1.0
    # Unclaimed, the dispatch goes back to the queue after the 2 s ack deadline, then to a real worker.
    cluster.start_worker("sse-worker")
    final = cluster.client.wait(execution["execution_id"], timeout=30)
    assert json.loads(final.output_json) == {"input": "via curl", "worker": "sse-worker"}
    assert final.generation >= 2


def test_unclaimed_sse_dispatch_is_cancelled_then_dispatched_again(cluster: Cluster, http) -> None:
    token = register(http, "silent")
    stream = Stream(http, "silent", token)
    try:
        hello = stream.next()
        assert hello.event == "connected" and hello.id == "1"
        assert data(hello)["worker_name"] == "silent" and data(hello)["held_execution_ids"] == []
        # The HTTP routes take no claim inside a result, whatever the core does: a worker here claims.
        assert not data(hello).get("claims_with_results")
        execution = http.post("/workflows/echo/run", json={"input": {"n": 1}}).json()
        assert execution["state"] in ("EXECUTION_STATE_CREATED", "EXECUTION_STATE_SCHEDULED")
        first = stream.next()
        assert first.event == "execution_scheduled"
        frame = data(first)
        assert frame["execution_id"] == execution["execution_id"] and json.loads(frame["input_json"]) == {
            "n": 1
        }
        assert frame["workflow"]["name"] == "echo"
        # Never claimed: after the 2 s ack deadline it is taken back, and, this being the only
        # worker, dispatched to it again under a newer generation.
        cancelled = stream.next()
        assert cancelled.event == "execution_cancelled"
        assert data(cancelled)["reason"] == "ack deadline expired"
        again = data(stream.next())
        assert again["execution_id"] == execution["execution_id"]
        assert int(again["generation"]) > int(frame["generation"])
        ids = [int(e.id) for e in stream.seen]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)

        path = f"/workers/silent/{{}}/{execution['execution_id']}"
        headers = {"X-Flux-Session": token}
        stale = http.post(path.format("claim"), json={"generation": frame["generation"]}, headers=headers)
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "FAILED_PRECONDITION"
        claim = http.post(path.format("claim"), json={"generation": again["generation"]}, headers=headers)
        assert claim.status_code == 200, claim.text
        done = http.post(
            path.format("complete"),
            json={"generation": again["generation"], "output_json": '"by hand"'},
            headers=headers,
        )
        assert done.status_code == 200, done.text
    finally:
        stream.close()
    final = http.get(f"/executions/{execution['execution_id']}").json()
    assert (final["state"], final["worker"], final["output_json"]) == (
        "EXECUTION_STATE_COMPLETED",
        "silent",
        '"by hand"',
    )


def test_resource_report_over_http_that_frees_capacity_triggers_dispatch(cluster: Cluster, http) -> None:
    token = register(http, "raw", BUSY)
    stream = Stream(http, "raw", token)
    try:
        assert stream.next().event == "connected"
        execution = http.post("/workflows/needs_cpu/run", json={"input": 0}).json()
        time.sleep(0.3)
        why = http.get(f"/executions/{execution['execution_id']}/explain").json()
        assert why["state"] == "EXECUTION_STATE_CREATED" and "0 of 4 cores free" in why["summary"]
        report = http.post(
            "/workers/raw/resources", json={"resources": FREE}, headers={"X-Flux-Session": token}
        )
        assert report.status_code == 200, report.text
        event = stream.next()
        assert event.event == "execution_scheduled"
        assert data(event)["execution_id"] == execution["execution_id"]
        assert data(event)["requests"]["cpu"] == 2
    finally:
        stream.close()


def test_refusals_have_the_documented_statuses_and_never_500(cluster: Cluster, http) -> None:
    token = register(http, "holder")
    stream = Stream(http, "holder", token)
    try:
        assert stream.next().event == "connected"
        auth = {"X-Flux-Session": token}
        cases = [
            # (method, path, body, headers, status, code)
            ("POST", "/workers/register", {"name": "x", "resources": {"cpu_total": "many"}}, None, 422, "INVALID_ARGUMENT"),
            ("POST", "/workers/register", {"name": "x", "resourcez": {}}, None, 422, "INVALID_ARGUMENT"),
            ("POST", "/workers/register", {"name": "x", "resources": {"cpu_total": -4}}, None, 422, "INVALID_ARGUMENT"),
            ("POST", "/workers/register", {"name": "bad name!"}, None, 422, "INVALID_ARGUMENT"),
            ("POST", "/workers/register", {"name": "x", "capacity": 1 << 40}, None, 422, "INVALID_ARGUMENT"),
            ("POST", "/workers/register", [1, 2], None, 422, "INVALID_ARGUMENT"),
            ("POST", "/workers/register", {"name": "holder"}, None, 409, "ALREADY_EXISTS"),
            ("GET", "/workers/ghost/connect", None, {"X-Flux-Session": "x"}, 404, "NOT_FOUND"),
            ("GET", "/workers/holder/connect", None, {"X-Flux-Session": "wrong"}, 403, "PERMISSION_DENIED"),
            ("GET", "/workers/holder/connect", None, None, 401, "UNAUTHENTICATED"),
            ("POST", "/workers/ghost/claim/e1", {"generation": 1}, {"X-Flux-Session": "x"}, 404, "NOT_FOUND"),
            ("POST", "/workers/holder/claim/e1", {"generation": "one"}, auth, 422, "INVALID_ARGUMENT"),
            ("POST", "/workers/holder/claim/e1", {"generation": 1}, auth, 404, "NOT_FOUND"),
            ("POST", "/workers/holder/claim/e1", {"generation": 1, "name": "other"}, auth, 422, "INVALID_ARGUMENT"),
            ("POST", "/workers/holder/complete/e1", {"generation": 1}, auth, 422, "INVALID_ARGUMENT"),
            (
                "POST", "/workers/holder/complete/e1",
                {"generation": 1, "output_json": "1", "error": {"type": "E"}}, auth, 422, "INVALID_ARGUMENT",
            ),
            ("POST", "/workers/holder/resources", {"resources": {"disk_free": -1}}, auth, 422, "INVALID_ARGUMENT"),
            ("GET", "/workers/holder/source/xyz", None, auth, 422, "INVALID_ARGUMENT"),
            ("GET", "/workers/holder/source/" + "0" * 64, None, auth, 404, "NOT_FOUND"),
            ("POST", "/workflows/nope/run", {}, None, 404, "NOT_FOUND"),
            ("POST", "/workflows/echo/run", {"version": -1}, None, 422, "INVALID_ARGUMENT"),
            ("POST", "/workflows/echo/run", {"timeout": 0}, None, 422, "INVALID_ARGUMENT"),
            ("POST", "/workflows", {"filename": "x.py", "source": "", "workflows": []}, None, 422, "INVALID_ARGUMENT"),
            ("GET", "/executions/nope", None, None, 404, "NOT_FOUND"),
            ("GET", "/executions/" + "x" * 500, None, None, 422, "INVALID_ARGUMENT"),
            ("POST", "/executions/nope/cancel", None, None, 404, "NOT_FOUND"),
            ("GET", "/no/such/route", None, None, 404, "NOT_FOUND"),
        ]  # fmt: skip
        for method, path, body, headers, status, code in cases:
            answer = http.request(method, path, json=body, headers=headers)
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (
                path,
                body,
                answer.text,
            )
            assert answer.json()["error"]["message"]
        broken = http.post(
            "/workers/register", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert broken.status_code == 422
        # The refusals left the held stream alone.
        assert connected(http, "holder")
    finally:
        stream.close()


def test_client_routes_register_run_wait_cancel_and_openapi(cluster: Cluster, http) -> None:
    source = "from flux import workflow\n@workflow\nasync def double(ctx):\n    return ctx.input * 2\n"
    registered = http.post(
        "/workflows",
        json={
            "filename": "double.py",
            "source": source,
            "workflows": [{"name": "double", "entrypoint": "double"}],
        },
    )
    assert registered.status_code == 200, registered.text
    assert registered.json()["workflows"][0]["version"] == 1
    accepted = http.post("/workflows/double/run", json={"input": 21})
    assert accepted.status_code == 202 and accepted.json()["state"] == "EXECUTION_STATE_CREATED"
    cluster.start_worker("rest-worker")
    finished = http.post("/workflows/double/run", json={"input": 4, "wait": True, "timeout": 20})
    assert finished.status_code == 200, finished.text
    assert finished.json()["state"] == "EXECUTION_STATE_COMPLETED" and finished.json()["output_json"] == "8"
    assert cluster.client.wait(accepted.json()["execution_id"], 20).output_json == "42"
    # A wait that runs out answers 202 with the execution as it is.
    slow = http.post("/workflows/sleepy/run", json={"input": 30, "wait": True, "timeout": 0.5})
    assert slow.status_code == 202 and slow.json()["state"] != "EXECUTION_STATE_COMPLETED"
    cancelled = http.post(f"/executions/{slow.json()['execution_id']}/cancel")
    assert cancelled.json()["state"] == "EXECUTION_STATE_CANCELLED"
    done = http.post(f"/executions/{finished.json()['execution_id']}/cancel")
    assert done.status_code == 409 and done.json()["error"]["code"] == "FAILED_PRECONDITION"
    workers = http.get("/workers").json()["workers"]
    assert [(w["name"], w["transport"], w["connected"]) for w in workers] == [("rest-worker", "sse", True)]
    assert http.get("/healthz").json()["status"] == "SERVING"

    spec = http.get("/openapi.json").json()
    expected = {
        "/workers/register", "/workers/{name}/connect", "/workers/{name}/resources",
        "/workers/{name}/claim/{execution_id}", "/workers/{name}/complete/{execution_id}",
        "/workers/{name}/release/{execution_id}", "/workers/{name}/source/{source_hash}",
        "/workflows", "/workflows/{name}/run", "/executions/{execution_id}",
        "/executions/{execution_id}/explain", "/executions/{execution_id}/cancel", "/workers", "/healthz",
        "/executions", "/workflows/{name}", "/workers/{name}/pause", "/workers/{name}/resume",
    }  # fmt: skip
    assert expected <= set(spec["paths"])
    assert (
        "text/event-stream" in spec["paths"]["/workers/{name}/connect"]["get"]["responses"]["200"]["content"]
    )
    docs = http.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_a_second_gateway_process_in_front_of_the_core_serves_a_worker(cluster: Cluster, http) -> None:
    process, url = cluster.start_gateway("--ping-interval", "0.3")
    assert url != cluster.gateway_url
    cluster.start_worker("far-worker", gateway=url)
    result = cluster.run("echo", "through the second gateway")
    assert json.loads(result.output_json)["worker"] == "far-worker"
    with authorized(cluster, url) as second:
        assert connected(second, "far-worker")
        # This gateway pings idle streams every 0.3 s, well before the core's 15 s.
        token = register(second, "idle")
        stream = Stream(second, "idle", token, read_timeout=3)
        try:
            hello = stream.next()
            assert data(hello)["ping_interval_ms"] == 300
            ping = stream.next(skip_pings=False)
            assert ping.event == "ping" and int(data(ping)["sent_at_ms"]) > 0
            # The core going away ends the gateway's stream, and so the SSE response.
            cluster.kill_server()
            with pytest.raises(AssertionError, match="the stream ended"):
                while True:
                    stream.next()
        finally:
            stream.close()
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        assert process.wait(timeout=10) == 0


def test_dispatches_ready_together_are_each_their_own_sse_event(cluster: Cluster, http) -> None:
    # Queued before the worker connects, they leave the core as one batch; the wire keeps the
    # contract: one execution_scheduled event per execution, ids counting up, each claimable.
    ids = [cluster.run("echo", i, wait=False).execution_id for i in range(20)]
    answer = http.post("/workers/register", json={"name": "batch-reader", "resources": FREE, "capacity": 64})
    assert answer.status_code == 200, answer.text
    token = answer.json()["session_token"]
    stream = Stream(http, "batch-reader", token)
    try:
        assert stream.next().event == "connected"
        events = [stream.next() for _ in ids]
        assert [e.event for e in events] == ["execution_scheduled"] * len(ids)
        assert [int(e.id) for e in events] == list(range(2, len(ids) + 2))
        dispatched = [data(e) for e in events]
        assert sorted(d["execution_id"] for d in dispatched) == sorted(ids)
        assert {json.loads(d["input_json"]) for d in dispatched} == set(range(20))
        answers = http.post(
            "/workers/batch-reader/claims",
            headers={"X-Flux-Session": token},
            json=[{"execution_id": d["execution_id"], "generation": d["generation"]} for d in dispatched],
        )
        assert answers.status_code == 200, answers.text
        assert all(a["ok"] for a in answers.json())
    finally:
        stream.close()
