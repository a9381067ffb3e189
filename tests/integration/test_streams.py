"""Streams for observers and for clients that cannot set headers, over plain HTTP and gRPC.

A real server (core and uvicorn gateway) on 127.0.0.1:0; the SSE streams are read
with httpx-sse, the fleet watch with a raw gRPC stub. The browser side of the same
features is in test_browser.py.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from httpx_sse import ServerSentEvent, connect_sse

from flux.domain.quantity import parse_bytes
from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

WORKFLOWS = Path(__file__).with_name("workflows.py")
ALLOWED = "http://127.0.0.1:9"  # an origin nothing serves: CORS answers only depend on the header


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster whose gateway lets pages from ALLOWED call it."""
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--cors-origin", ALLOWED, "--ack-deadline", "5")
        cluster.register(WORKFLOWS)
        yield cluster
    finally:
        cluster.close()


def client(cluster: Cluster, role: Role = Role.CLIENT) -> httpx.Client:
    return httpx.Client(
        base_url=cluster.gateway_url,
        timeout=10,
        trust_env=False,
        headers={"Authorization": f"Bearer {cluster.token(role)}"},
    )


@pytest.fixture
def http(server: Cluster) -> Iterator[httpx.Client]:
    with client(server) as c:
        yield c


class Reader:
    """An SSE stream read on a thread, so a test can act while events arrive."""

    def __init__(self, http: httpx.Client, method: str, url: str, **kwargs: object):
        self.events: queue.Queue[ServerSentEvent | None] = queue.Queue()
        self.status: queue.Queue[int] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(http, method, url, kwargs), daemon=True)
        self._thread.start()
        status = self.status.get(timeout=15)
        assert status == 200, f"{url} answered {status}"

    def _read(self, http: httpx.Client, method: str, url: str, kwargs: dict) -> None:
        try:
            with connect_sse(http, method, url, timeout=httpx.Timeout(10, read=None), **kwargs) as source:
                self.status.put(source.response.status_code)
                for event in source.iter_sse():
                    if self._stop.is_set():
                        return
                    self.events.put(event)
        except httpx.HTTPError:
            pass
        finally:
            self.events.put(None)

    def next(self, timeout: float = 15) -> ServerSentEvent:
        event = self.events.get(timeout=timeout)
        assert event is not None, "the stream ended"
        return event

    def until(self, name: str, test=lambda data: True, timeout: float = 15) -> dict:  # type: ignore[no-untyped-def]
        """The data of the next event called ``name`` that passes ``test``, skipping others."""
        while True:
            event = self.next(timeout)
            if event.event == name and test(json.loads(event.data)):
                return json.loads(event.data)

    def close(self) -> None:
        self._stop.set()


def read_all(http: httpx.Client, method: str, url: str, **kwargs: object) -> list[ServerSentEvent]:
    """Every event of a stream that ends by itself."""
    with connect_sse(http, method, url, timeout=httpx.Timeout(10, read=30), **kwargs) as source:
        assert source.response.status_code == 200, source.response.read()
        return list(source.iter_sse())


def states(events: list[ServerSentEvent]) -> list[str]:
    return [json.loads(e.data)["state"].removeprefix("EXECUTION_STATE_") for e in events]


def mint(http: httpx.Client, **body: str) -> dict:
    answer = http.post("/tickets", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def refusal(answer: httpx.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    return answer.json()["error"]["message"]


# ----------------------------------------------------------------- run and stream, execution events


def test_run_and_stream_follows_the_execution_to_its_output(server: Cluster, http: httpx.Client) -> None:
    server.start_worker("w1")
    events = read_all(
        http, "POST", "/workflows/echo/run", json={"input": {"n": 1}}, headers={"Accept": "text/event-stream"}
    )
    assert {e.event for e in events} == {"execution"}
    # A free worker takes it as it is submitted: the state RunWorkflow answered comes first.
    assert states(events)[0] == "SCHEDULED" and states(events)[-1] == "COMPLETED", states(events)
    final = json.loads(events[-1].data)
    assert json.loads(final["output_json"]) == {"input": {"n": 1}, "worker": "w1"}
    ids = [tuple(int(p) for p in e.id.split(".")) for e in events]
    assert ids == sorted(set(ids)), f"ids must strictly increase: {ids}"
    # The same call without the Accept header still answers JSON.
    plain = http.post("/workflows/echo/run", json={"input": 2, "wait": True})
    assert plain.status_code == 200 and plain.json()["state"] == "EXECUTION_STATE_COMPLETED"


def test_a_batch_is_waited_for_in_one_stream_in_completion_order(server: Cluster, http: httpx.Client) -> None:
    server.start_worker("w1")
    done = http.post("/workflows/echo/run", json={"input": 0, "wait": True}).json()
    server.client.pause_worker("w1")  # the rest wait until the test cancels them, one at a time
    accepted = http.post("/workflows/echo/run-many", json={"inputs": [1, 2]}).json()["executions"]
    ids = [e["execution_id"] for e in accepted]
    # The stream opens (200) before anything new finishes; the finished one comes first.
    reader = Reader(http, "POST", "/executions/wait", json={"execution_ids": [*ids, done["execution_id"]]})
    first = reader.until("execution")
    assert first["execution_id"] == done["execution_id"] and first["state"] == "EXECUTION_STATE_COMPLETED"
    for execution_id in (ids[1], ids[0]):
        assert http.post(f"/executions/{execution_id}/cancel").status_code == 200
        event = reader.next()
        data = json.loads(event.data)
        assert event.event == "execution" and data["execution_id"] == execution_id
        assert data["state"] == "EXECUTION_STATE_CANCELLED" and not data.get("input_json")
    assert reader.events.get(timeout=15) is None  # the stream ends after the last


def test_waiting_for_a_batch_refuses_unknown_and_malformed_ids(server: Cluster, http: httpx.Client) -> None:
    assert "feedbeef" in refusal(http.post("/executions/wait", json={"execution_ids": ["feedbeef"]}), 404)
    assert http.post("/executions/wait", json={"execution_ids": []}).status_code == 422
    assert http.post("/executions/wait", json={"ids": ["a"]}).status_code == 422
    assert http.post("/executions/wait", json={"execution_ids": ["x" * 500]}).status_code in (400, 422)
    with client(server, Role.WORKER) as worker:
        assert worker.post("/executions/wait", json={"execution_ids": ["feedbeef"]}).status_code == 403


def test_a_run_that_waits_past_its_timeout_answers_202_with_the_accepted_execution(
    server: Cluster, http: httpx.Client
) -> None:
    answer = http.post("/workflows/echo/run", json={"input": 1, "wait": True, "timeout": 0.3})
    assert answer.status_code == 202 and answer.json()["state"] == "EXECUTION_STATE_CREATED"
    assert refusal(http.post("/workflows/nope/run", json={"wait": True}), 404)
    assert "nope" in refusal(
        http.post("/workflows/nope/run", json={}, headers={"Accept": "text/event-stream"}), 404
    )


def test_execution_events_resume_after_last_event_id(server: Cluster, http: httpx.Client) -> None:
    execution_id = http.post("/workflows/echo/run", json={"input": 1}).json()["execution_id"]
    url = f"/executions/{execution_id}/events"
    # No worker yet: the stream starts with CREATED and waits.
    waiting = Reader(http, "GET", url)
    first = waiting.next()
    assert first.event == "execution" and states([first]) == ["CREATED"] and first.id == "0.0"
    server.start_worker("w1")
    seen = [first]
    while states(seen)[-1] != "COMPLETED":
        seen.append(waiting.next())
    assert waiting.events.get(timeout=10) is None, "the stream ends after the final state"
    assert states(seen) == ["CREATED", "SCHEDULED", "RUNNING", "COMPLETED"]

    # It has finished: resuming after any earlier event sends the final state, once, whether
    # the id comes as the header an EventSource sets or in the query.
    for i, event in enumerate(seen[:-1]):
        resumed = read_all(http, "GET", url, headers={"Last-Event-ID": event.id})
        assert [e.id for e in resumed] == [e.id for e in seen[i + 1 :]][-1:]
        by_query = read_all(http, "GET", f"{url}?last_event_id={event.id}")
        assert [e.id for e in by_query] == [e.id for e in resumed]
    # After the final event there is nothing more: 204 tells an EventSource to stop.
    assert http.get(url, headers={"Last-Event-ID": seen[-1].id}).status_code == 204
    assert "GENERATION.STEP" in refusal(http.get(url, headers={"Last-Event-ID": "junk"}), 422)
    assert "does not exist" in refusal(http.get("/executions/nope/events"), 404)
    assert "missing credentials" in refusal(
        httpx.get(f"{server.gateway_url}{url}", timeout=10, trust_env=False), 401
    )


# ----------------------------------------------------------------- tickets


def test_tickets_open_one_stream_of_their_scope_once(server: Cluster, http: httpx.Client) -> None:
    server.start_worker("w1")
    execution_id = http.post("/workflows/echo/run", json={"input": 1, "wait": True}).json()["execution_id"]
    anonymous = httpx.Client(base_url=server.gateway_url, timeout=10, trust_env=False)

    ticket = mint(http, scope="execution", execution_id=execution_id)
    assert ticket["scope"] == f"execution:{execution_id}" and ticket["expires_in_s"] > 0
    assert ticket["url"] == f"/executions/{execution_id}/events?ticket={ticket['ticket']}"
    assert states(read_all(anonymous, "GET", ticket["url"])) == ["COMPLETED"]
    assert "already used" in refusal(anonymous.get(ticket["url"]), 401)

    # A ticket for one stream opens no other, and stays good for its own.
    fleet = mint(http, scope="fleet")
    message = refusal(anonymous.get(f"/executions/{execution_id}/events?ticket={fleet['ticket']}"), 403)
    assert message == f"the ticket is for fleet, not execution:{execution_id}"
    reader = Reader(anonymous, "GET", fleet["url"])
    assert reader.next().event == "workers"
    reader.close()

    assert "unknown" in refusal(anonymous.get("/events?ticket=made-up"), 401)
    # Minting needs the credentials the stream itself needs, checked at once.
    assert "missing credentials" in refusal(anonymous.post("/tickets", json={"scope": "fleet"}), 401)
    assert "does not exist" in refusal(
        http.post("/tickets", json={"scope": "execution", "execution_id": "x"}), 404
    )
    assert "execution_id is required" in refusal(http.post("/tickets", json={"scope": "execution"}), 422)
    with client(server, Role.WORKER) as worker_http:
        assert "X-Flux-Session" in refusal(
            worker_http.post("/tickets", json={"scope": "worker", "worker": "w9"}), 401
        )
        assert "cannot call" in refusal(worker_http.post("/tickets", json={"scope": "fleet"}), 403)
        assert "is not registered" in refusal(
            worker_http.post(
                "/tickets", json={"scope": "worker", "worker": "w9"}, headers={"X-Flux-Session": "made-up"}
            ),
            404,
        )


def test_the_auth_check_and_the_route_read_one_ticket(server: Cluster, http: httpx.Client) -> None:
    """The middleware once read ``?ticket=&ticket=GOOD`` as one ticket (blank dropped) and the route
    as another (the last): one parser now, and a repeated ticket is refused by both alike."""
    anonymous = httpx.Client(base_url=server.gateway_url, timeout=10, trust_env=False)
    good = mint(http, scope="fleet")["ticket"]
    for query in (f"ticket=&ticket={good}", f"ticket={good}&ticket=", f"ticket={good}&ticket={good}"):
        assert "more than once" in refusal(anonymous.get(f"/events?{query}"), 401), query
        # Beside valid headers too: the ticket would be what opens the stream.
        assert "more than once" in refusal(http.get(f"/events?{query}"), 401), query
    reader = Reader(anonymous, "GET", f"/events?ticket={good}")  # not spent by the refusals
    assert reader.next().event == "workers"
    reader.close()


def test_a_worker_connects_with_a_ticket_and_no_token_in_the_url(server: Cluster, http: httpx.Client) -> None:
    with client(server, Role.WORKER) as worker_http:
        registered = worker_http.post(
            "/workers/register", json={"name": "hand", "resources": {"cpu_total": 2, "memory_total": "1Gi"}}
        )
        assert registered.status_code == 200, registered.text
        session = registered.json()["session_token"]
        answer = worker_http.post(
            "/tickets", json={"scope": "worker", "worker": "hand"}, headers={"X-Flux-Session": session}
        )
        assert answer.status_code == 200, answer.text
        ticket = answer.json()
        wrong = worker_http.post(
            "/tickets", json={"scope": "worker", "worker": "hand"}, headers={"X-Flux-Session": "made-up"}
        )
        assert "session_token does not match worker 'hand'" in refusal(wrong, 403)
    url = ticket["url"]
    assert session not in url and server.token(Role.WORKER) not in url
    anonymous = httpx.Client(base_url=server.gateway_url, timeout=10, trust_env=False)
    stream = Reader(anonymous, "GET", url)
    connected = stream.next()
    assert connected.event == "connected" and json.loads(connected.data)["worker_name"] == "hand"
    assert "already used" in refusal(anonymous.get(url), 401)
    stream.close()


# ----------------------------------------------------------------- quantities in JSON


def test_quantities_are_strings_as_in_python(server: Cluster, http: httpx.Client) -> None:
    with client(server, Role.WORKER) as worker_http:
        resources = {"cpu_total": 2, "memory_total": "8Gi", "memory_available": "512Mi", "disk_total": "10G"}
        answer = worker_http.post("/workers/register", json={"name": "q1", "resources": resources})
        assert answer.status_code == 200, answer.text
        for wrong in ("8GB", "8gb"):
            answer = worker_http.post(
                "/workers/register", json={"name": "q2", "resources": {"memory_total": wrong}}
            )
            # Word for word what the Python API says, with the field's path in the body.
            with pytest.raises(ValueError) as python:
                parse_bytes(wrong, "resources.memory_total")
            assert refusal(answer, 422) == str(python.value)
            assert "did you mean 8Gi for 1024^n or 8G for 1000^n?" in str(python.value)
        # int64 as a string, and int bytes, stay accepted.
        for value in ("4096", 4096):
            resources = {"disk_free": value}
            answer = worker_http.post(
                "/workers/register", json={"name": f"q3-{type(value).__name__}", "resources": resources}
            )
            assert answer.status_code == 200, answer.text
        answer = worker_http.post(
            "/workers/register", json={"name": "q4", "resources": {"memory_total": "lots"}}
        )
        assert "invalid literal" not in refusal(answer, 422)
    workers = {w["name"]: w for w in http.get("/workers").json()["workers"]}
    assert workers["q1"]["resources"]["memory_total"] == str(8 << 30)
    assert workers["q1"]["resources"]["memory_available"] == str(512 << 20)
    assert workers["q1"]["resources"]["disk_total"] == str(10 * 10**9)

    source = "from flux import workflow\n\n@workflow\nasync def sized(ctx):\n    return 1\n"
    sized = {"name": "sized", "entrypoint": "sized", "requests": {"cpu": 1, "memory": "2Gi", "disk": "1G"}}
    body = {"filename": "sized.py", "source": source, "workflows": [sized]}
    answer = http.post("/workflows", json=body)
    assert answer.status_code == 200, answer.text
    stored = http.get("/workflows/sized").json()["workflows"][0]["requests"]
    assert (stored["memory"], stored["disk"]) == (str(2 << 30), str(10**9))
    sized["requests"]["memory"] = "2GB"
    assert "did you mean 2Gi" in refusal(http.post("/workflows", json=body), 422)


# ----------------------------------------------------------------- the fleet feed


def test_fleet_events_over_sse(server: Cluster, http: httpx.Client) -> None:
    feed = Reader(http, "GET", "/events")
    first = feed.next()
    assert first.event == "workers" and first.id == "1" and json.loads(first.data)["workers"] == []
    server.start_worker("w1")
    assert feed.until("worker_connected")["name"] == "w1"
    execution_id = http.post("/workflows/echo/run", json={"input": 1}).json()["execution_id"]
    mine = lambda data: data["execution_id"] == execution_id  # noqa: E731
    assert feed.until("execution_queued", mine)["state"] == "EXECUTION_STATE_CREATED"
    dispatched = feed.until("execution_dispatched", mine)
    assert dispatched["worker"] == "w1" and dispatched["input_json"] == ""
    finished = feed.until("execution_finished", mine)
    assert finished["state"] == "EXECUTION_STATE_COMPLETED" and finished["output_json"] == ""
    assert http.post("/workers/w1/pause").status_code == 200
    assert feed.until("worker_paused")["paused"] is True
    assert http.post("/workers/w1/resume").status_code == 200
    assert feed.until("worker_resumed")["paused"] is False
    feed.close()


def test_fleet_watch_over_grpc(server: Cluster) -> None:
    stub = control_pb2_grpc.ControlServiceStub(server.channel(Role.CLIENT))
    watch = stub.WatchFleet(control_pb2.WatchFleetRequest(), timeout=60)
    events: queue.Queue[control_pb2.FleetEvent] = queue.Queue()

    def read() -> None:
        with contextlib.suppress(grpc.RpcError):
            for event in watch:
                events.put(event)

    threading.Thread(target=read, daemon=True).start()
    first = events.get(timeout=15)
    assert first.WhichOneof("event") == "workers" and first.sequence == 1
    server.start_worker("w1")
    execution = server.run("echo", 5)
    kinds: list[str] = []
    sequences = [first.sequence]
    eventually(
        lambda: _drain(events, kinds, sequences) and "execution_finished" in kinds, what="the finished event"
    )
    assert sequences == list(range(1, len(sequences) + 1)), "every sequence number, in order"
    assert kinds.index("worker_connected") < kinds.index("execution_queued")
    assert (
        kinds.index("execution_queued")
        < kinds.index("execution_dispatched")
        < kinds.index("execution_finished")
    )
    assert execution.state == control_pb2.EXECUTION_STATE_COMPLETED
    watch.cancel()

    # The worker token cannot watch the fleet.
    worker_stub = control_pb2_grpc.ControlServiceStub(server.channel(Role.WORKER))
    with pytest.raises(grpc.RpcError) as refused:
        next(iter(worker_stub.WatchFleet(control_pb2.WatchFleetRequest(), timeout=10)))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def _drain(events: queue.Queue, kinds: list[str], sequences: list[int]) -> bool:  # type: ignore[type-arg]
    while not events.empty():
        event = events.get()
        kinds.append(event.WhichOneof("event"))
        sequences.append(event.sequence)
    return True


# ----------------------------------------------------------------- CORS


def test_cors_answers_only_listed_origins(server: Cluster, tmp_path: Path) -> None:
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,x-flux-session",
    }
    allowed = httpx.options(
        f"{server.gateway_url}/workers/register", headers={"Origin": ALLOWED, **preflight}, trust_env=False
    )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ALLOWED
    assert "x-flux-session" in allowed.headers["access-control-allow-headers"].lower()
    refused = httpx.options(
        f"{server.gateway_url}/workers/register",
        headers={"Origin": "http://elsewhere.example", **preflight},
        trust_env=False,
    )
    assert "access-control-allow-origin" not in refused.headers
    # A refusal carries the header too, so the page can read why.
    answer = httpx.get(f"{server.gateway_url}/executions/x", headers={"Origin": ALLOWED}, trust_env=False)
    assert answer.status_code == 401 and answer.headers["access-control-allow-origin"] == ALLOWED

    # Without --cors-origin nothing changes: no CORS headers, and no preflight route.
    plain = Cluster(tmp_path / "plain")
    (tmp_path / "plain").mkdir()
    try:
        plain.start_server()
        answer = httpx.options(
            f"{plain.gateway_url}/workers/register", headers={"Origin": ALLOWED, **preflight}, trust_env=False
        )
        assert answer.status_code == 405 and "access-control-allow-origin" not in answer.headers
    finally:
        plain.close()
