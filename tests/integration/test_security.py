"""Tokens, worker identity and TLS against real processes on 127.0.0.1."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest

from flux.client import FluxClient
from flux.errors import PermissionDenied, Unauthenticated, Unavailable
from flux.security import Credentials, Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc, resources_pb2, worker_pb2, worker_pb2_grpc
from tests.integration.tls import make_pki

pytestmark = pytest.mark.integration
WORKFLOWS = Path(__file__).with_name("workflows.py")


@pytest.mark.transports("grpc")
@pytest.mark.parametrize(
    ("token", "expected"),
    [
        pytest.param("", Unauthenticated, id="no token"),
        pytest.param("not-the-token", Unauthenticated, id="wrong token"),
        pytest.param("worker", PermissionDenied, id="worker token used as a client token"),
    ],
)
def test_clients_without_the_api_token_are_refused(cluster: Cluster, token: str, expected: type) -> None:
    token = cluster.token(Role.WORKER) if token == "worker" else token
    with (
        FluxClient(cluster.address, timeout=5, credentials=Credentials(token)) as client,
        pytest.raises(expected),
    ):
        client.run("echo", 1)


@pytest.mark.transports("grpc")
@pytest.mark.parametrize(
    ("token", "code"),
    [
        pytest.param("", grpc.StatusCode.UNAUTHENTICATED, id="no token"),
        pytest.param("not-the-token", grpc.StatusCode.UNAUTHENTICATED, id="wrong token"),
        pytest.param("api", grpc.StatusCode.PERMISSION_DENIED, id="client token used as a worker token"),
    ],
)
def test_workers_without_the_worker_token_are_refused_over_grpc(cluster: Cluster, token: str, code) -> None:
    token = cluster.token(Role.CLIENT) if token == "api" else token
    with grpc.insecure_channel(cluster.address) as channel:
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        with pytest.raises(grpc.RpcError) as info:
            stub.Register(worker_pb2.RegisterRequest(name="intruder"), metadata=metadata, timeout=5)
        assert info.value.code() == code
        with pytest.raises(grpc.RpcError) as info:
            next(stub.Connect(worker_pb2.ConnectRequest(name="intruder"), metadata=metadata, timeout=5))
        assert info.value.code() == code
    assert "intruder" not in {w.name for w in cluster.client.workers().workers}


@pytest.mark.transports("sse")
@pytest.mark.parametrize(
    ("route", "token", "status"),
    [
        pytest.param("/workers/register", "", 401, id="register without a token"),
        pytest.param("/workers/register", "wrong", 401, id="register with a wrong token"),
        pytest.param("/workers/register", "api", 403, id="register with the client token"),
        pytest.param("/workflows/echo/run", "", 401, id="run without a token"),
        pytest.param("/workflows/echo/run", "worker", 403, id="run with the worker token"),
    ],
)
def test_gateway_refuses_missing_wrong_and_misused_tokens(
    cluster: Cluster, route: str, token: str, status: int
):
    token = {"api": cluster.token(Role.CLIENT), "worker": cluster.token(Role.WORKER)}.get(token, token)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"name": "intruder"} if route == "/workers/register" else {"input": 1}
    answer = httpx.post(cluster.gateway_url + route, json=body, headers=headers, timeout=10, trust_env=False)
    assert answer.status_code == status, answer.text
    assert "secret" not in answer.text and (not token or token not in answer.text)


@pytest.mark.transports("grpc")
def test_a_worker_cannot_act_on_another_workers_execution(cluster: Cluster) -> None:
    channel = cluster.channel(Role.WORKER)
    stub = worker_pb2_grpc.WorkerServiceStub(channel)
    free = resources_pb2.WorkerResources(cpu_total=4, cpu_available=4)
    token_a = stub.Register(worker_pb2.RegisterRequest(name="alice", resources=free)).session_token
    token_b = stub.Register(
        worker_pb2.RegisterRequest(name="bob", resources=free, labels={"x": "y"})
    ).session_token
    stream_a = stub.Connect(worker_pb2.ConnectRequest(name="alice", session_token=token_a))
    assert next(stream_a).WhichOneof("event") == "connected"
    # Only alice is connected, so the execution is dispatched to her.
    execution = cluster.run("echo", "mine", wait=False)
    scheduled = next(
        e for e in stream_a if e.WhichOneof("event") == "execution_scheduled"
    ).execution_scheduled
    target = {"execution_id": scheduled.execution_id, "generation": scheduled.generation}
    for call, request in (
        (stub.Claim, worker_pb2.ClaimRequest(name="bob", session_token=token_b, **target)),
        (stub.Release, worker_pb2.ReleaseRequest(name="bob", session_token=token_b, **target)),
        (stub.Claim, worker_pb2.ClaimRequest(name="alice", session_token=token_b, **target)),  # bob posing
    ):
        with pytest.raises(grpc.RpcError) as info:
            call(request, timeout=5)
        assert info.value.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED)
    stub.Claim(worker_pb2.ClaimRequest(name="alice", session_token=token_a, **target), timeout=5)
    with pytest.raises(grpc.RpcError) as info:
        stub.Complete(
            worker_pb2.CompleteRequest(name="bob", session_token=token_b, output_json='"stolen"', **target),
            timeout=5,
        )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    stub.Complete(
        worker_pb2.CompleteRequest(name="alice", session_token=token_a, output_json='"hers"', **target)
    )
    final = cluster.client.wait(execution.execution_id, 10)
    assert (final.worker, json.loads(final.output_json)) == ("alice", "hers")
    stream_a.cancel()
    channel.close()


def test_tls_end_to_end_and_plaintext_is_refused(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    cluster = Cluster(tmp_path / "cluster")
    (tmp_path / "cluster").mkdir()
    cluster.ca = str(pki.ca)
    try:
        cluster.start_server("--tls-cert", str(pki.cert), "--tls-key", str(pki.key))
        assert cluster.gateway_url.startswith("https://")
        cluster.register(WORKFLOWS)
        cluster.start_worker("tls-grpc", "--ca", str(pki.ca))
        done = cluster.run("echo", "over tls")
        assert json.loads(done.output_json) == {"input": "over tls", "worker": "tls-grpc"}
        # A plaintext client cannot talk to it.
        plain = FluxClient(cluster.address, timeout=3, credentials=Credentials(cluster.token(Role.CLIENT)))
        with plain, pytest.raises(Unavailable):
            plain.run("echo", 1)
        # The gateway speaks HTTPS with the same certificate; an SSE worker verifies it with --ca.
        cluster.transport = "sse"
        cluster.start_worker("tls-sse", "--ca", str(pki.ca), "--label", "via=sse")
        answer = httpx.get(
            cluster.gateway_url + "/workers",
            headers={"Authorization": f"Bearer {cluster.token(Role.CLIENT)}"},
            verify=ssl.create_default_context(cafile=str(pki.ca)),
            timeout=10,
            trust_env=False,
        )
        assert {w["name"] for w in answer.json()["workers"] if w["connected"]} == {"tls-grpc", "tls-sse"}
        with pytest.raises(httpx.TransportError):  # plaintext HTTP to the TLS port: no answer
            httpx.get(cluster.gateway_url.replace("https", "http") + "/healthz", timeout=3, trust_env=False)
    finally:
        cluster.close()


def test_insecure_is_refused_off_loopback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flux", "start", "server", "--insecure", "--host", "0.0.0.0", "--grpc-port", "0",
         "--http-port", "0", "--db", str(tmp_path / "x.db")],
        cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1
    assert "--insecure is refused on 0.0.0.0" in result.stderr


def test_generated_tokens_are_owner_only_and_never_printed(cluster: Cluster) -> None:
    for role in Role:
        path = cluster.workdir / ".flux" / role.filename
        assert path.stat().st_mode & 0o077 == 0
    logs = "".join(p.read_text() for p in cluster.workdir.glob("*.log"))
    # Log collectors keep the server's output: it says where each token is, never the token.
    for role in Role:
        assert cluster.token(role) not in logs
        path = cluster.workdir / ".flux" / role.filename
        assert (
            f"generated {role.value} token, written to {path} (owner-only); "
            f"print it with: flux token show {role.value}"
        ) in logs


@pytest.mark.transports("grpc")
def test_token_show_prints_a_generated_token_or_says_where_it_looked(
    cluster: Cluster, tmp_path: Path
) -> None:
    for role in Role:
        shown = cluster.flux("token", "show", role.value)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == cluster.token(role) + "\n"
    both = cluster.flux("token", "show")
    assert both.stdout == f"worker\t{cluster.token(Role.WORKER)}\napi\t{cluster.token(Role.CLIENT)}\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    missing = subprocess.run(
        [sys.executable, "-m", "flux", "token", "show", "api"], cwd=elsewhere, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert missing.returncode == 1 and missing.stdout == ""
    assert f"error: no api token at {elsewhere / '.flux' / 'api.token'}" in missing.stderr
    assert "--api-token-file or $FLUX_API_TOKEN" in missing.stderr
    wrong = cluster.flux("token", "show", "admin")
    assert wrong.returncode == 2 and "invalid choice: 'admin'" in wrong.stderr


def test_control_stub_with_api_token_works(cluster: Cluster) -> None:
    with cluster.channel(Role.CLIENT) as channel:
        stub = control_pb2_grpc.ControlServiceStub(channel)
        assert isinstance(
            stub.ListWorkers(control_pb2.ListWorkersRequest(), timeout=5), control_pb2.ListWorkersResponse
        )


@pytest.mark.transports("grpc")
def test_a_token_given_as_a_flag_warns_that_the_process_list_shows_it(cluster: Cluster) -> None:
    flagged = cluster.flux("workers", "list", "--api-token", cluster.token(Role.CLIENT))
    assert flagged.returncode == 0, flagged.stderr
    assert "warning: --api-token is visible to other local users in the process list" in flagged.stderr
    assert "prefer --api-token-file PATH or $FLUX_API_TOKEN" in flagged.stderr
    assert cluster.token(Role.CLIENT) not in flagged.stderr
    token_file = cluster.workdir / "api-token-copy"
    token_file.write_text(cluster.token(Role.CLIENT))
    quiet = cluster.flux("workers", "list", "--api-token-file", str(token_file))
    assert quiet.returncode == 0 and "warning" not in quiet.stderr
