"""Listings through every door: `flux execution list|show`, `flux workflow list|show`, gRPC and HTTP.

They read the store, so they run on both backends.
"""

from __future__ import annotations

import json

import grpc
import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [
    pytest.mark.integration,
    pytest.mark.transports("grpc"),
    pytest.mark.backends("sqlite", "postgres"),
]

COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
FAILED = control_pb2.EXECUTION_STATE_FAILED


def _json(cluster: Cluster, *args: str) -> dict:
    done = cluster.flux(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_execution_list_filters_pages_and_show(cluster: Cluster) -> None:
    cluster.start_worker("lister", "--cpus", "4")
    echoes = [cluster.run("echo", n) for n in range(5)]
    failed = cluster.run("boom", "bad")
    waiting = cluster.run("needs_cpu_8", wait=False)  # no worker has 8 cores: stays CREATED
    assert {e.state for e in echoes} == {COMPLETED} and failed.state == FAILED

    everything = _json(cluster, "execution", "list")["executions"]
    # Newest submission first.
    assert [e["execution_id"] for e in everything] == [
        waiting.execution_id, failed.execution_id, *[e.execution_id for e in reversed(echoes)]
    ]  # fmt: skip

    by_state = _json(cluster, "execution", "list", "--state", "failed", "--state", "CREATED")["executions"]
    assert {(e["execution_id"], e["state"]) for e in by_state} == {
        (failed.execution_id, "FAILED"), (waiting.execution_id, "CREATED")
    }  # fmt: skip
    by_workflow = _json(cluster, "execution", "list", "--workflow", "echo")["executions"]
    assert [e["output"]["input"] for e in by_workflow] == [4, 3, 2, 1, 0]
    by_worker = _json(cluster, "execution", "list", "--worker", "lister", "--since", "10m")["executions"]
    assert len(by_worker) == 6 and {e["worker"] for e in by_worker} == {"lister"}
    assert _json(cluster, "execution", "list", "--worker", "nobody")["executions"] == []

    # --limit pages through the server; the token continues exactly after the last row.
    first = _json(cluster, "execution", "list", "--workflow", "echo", "--limit", "2")
    assert [e["output"]["input"] for e in first["executions"]] == [4, 3] and first["next_page_token"]
    rest = _json(
        cluster,
        "execution",
        "list",
        "--workflow",
        "echo",
        "--limit",
        "10",
        "--page-token",
        first["next_page_token"],
    )
    assert [e["output"]["input"] for e in rest["executions"]] == [2, 1, 0] and rest["next_page_token"] == ""

    table = cluster.flux("execution", "list", "--state", "completed")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:4] == ["EXECUTION", "WORKFLOW", "STATE", "WORKER"] and len(rows) == 5
    assert all("COMPLETED" in row and "lister" in row for row in rows)

    shown = cluster.flux("execution", "show", failed.execution_id)
    assert shown.returncode == 1  # as `workflow status`: a failed execution exits non-zero
    assert "state      FAILED" in shown.stdout and '"bad"' in shown.stdout and "Traceback" in shown.stdout
    record = json.loads(cluster.flux("execution", "show", echoes[0].execution_id, "--json").stdout)
    assert (record["state"], record["worker"], record["input"], record["output"]["input"]) == (
        "COMPLETED", "lister", 0, 0
    )  # fmt: skip


def test_bad_listing_filters_name_the_field(cluster: Cluster) -> None:
    refused = cluster.flux("execution", "list", "--state", "DONE")
    assert refused.returncode == 2 and "--state must be one of CREATED" in refused.stderr
    refused = cluster.flux("execution", "list", "--since", "yesterday")
    assert refused.returncode == 2 and "--since must be a duration" in refused.stderr
    refused = cluster.flux("execution", "list", "--page-token", "garbage!")
    assert refused.returncode == 1 and "page_token" in refused.stderr

    with cluster.channel(Role.CLIENT) as channel:
        stub = control_pb2_grpc.ControlServiceStub(channel)
        for request, named in (
            (control_pb2.ListExecutionsRequest(states=[42]), "states[0]"),
            (control_pb2.ListExecutionsRequest(states=[0]), "states[0]"),
            (control_pb2.ListExecutionsRequest(page_size=1001), "page_size"),
            (control_pb2.ListExecutionsRequest(page_token="bm9wZQ"), "page_token"),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                stub.ListExecutions(request, timeout=5)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert named in caught.value.details()
        assert "CREATED (1)" in _invalid_details(stub, control_pb2.ListExecutionsRequest(states=[9]))


def _invalid_details(
    stub: control_pb2_grpc.ControlServiceStub, request: control_pb2.ListExecutionsRequest
) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        stub.ListExecutions(request, timeout=5)
    return caught.value.details()


def test_workflow_list_and_show(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    listed = {w["name"]: w for w in _json(cluster, "workflow", "list")["workflows"]}
    assert {"echo", "trainer", "needs_torch"} <= set(listed)
    trainer = listed["trainer"]
    assert (trainer["version"], trainer["version_count"], trainer["runtime"]) == (1, 1, "python")
    assert trainer["requests"]["cpu"] == 2 and trainer["affinity"] == {"role": "training"}
    assert trainer["filename"] == "workflows.py" and len(trainer["source_hash"]) == 64

    # A second version of one name: list shows the latest, show every version.
    again = tmp_path / "trainer_v2.py"
    again.write_text(
        "from flux import workflow\nfrom flux.domain.resource_request import ResourceRequest\n\n\n"
        "@workflow.with_options(name='trainer', requests=ResourceRequest(cpu=4))\n"
        "async def trainer(ctx):\n    return 2\n"
    )
    assert cluster.flux("workflow", "register", str(again)).returncode == 0
    latest = {w["name"]: w for w in _json(cluster, "workflow", "list")["workflows"]}["trainer"]
    assert (latest["version"], latest["version_count"], latest["requests"]["cpu"]) == (2, 2, 4)
    shown = _json(cluster, "workflow", "show", "trainer")
    assert [(v["version"], v["filename"]) for v in shown["versions"]] == [
        (1, "workflows.py"),
        (2, "trainer_v2.py"),
    ]
    one = _json(cluster, "workflow", "show", "trainer", "--version", "1")
    assert [v["version"] for v in one["versions"]] == [1] and one["versions"][0]["affinity"] == {
        "role": "training"
    }

    text = cluster.flux("workflow", "show", "trainer")
    assert text.returncode == 0, text.stderr
    assert "workflow     trainer v2 (of 2)" in text.stdout and "runtime      python" in text.stdout
    assert "VERSION" in text.stdout and "v1" in text.stdout
    table = cluster.flux("workflow", "list")
    assert table.stdout.splitlines()[0].split()[:4] == ["NAME", "LATEST", "VERSIONS", "RUNTIME"]

    missing = cluster.flux("workflow", "show", "nope")
    assert missing.returncode == 1 and "workflow 'nope' is not registered" in missing.stderr
    missing = cluster.flux("workflow", "show", "trainer", "--version", "7")
    assert missing.returncode == 1 and "has no version 7" in missing.stderr


def test_listings_over_http(cluster: Cluster) -> None:
    cluster.start_worker("web")
    ids = [cluster.run("echo", n).execution_id for n in range(3)]
    headers = {"authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
    with httpx.Client(base_url=cluster.gateway_url, headers=headers, timeout=10, trust_env=False) as http:
        page = http.get("/executions", params={"workflow": "echo", "limit": 2, "state": ["completed"]})
        assert page.status_code == 200, page.text
        body = page.json()
        assert [e["execution_id"] for e in body["executions"]] == ids[:0:-1] and body["next_page_token"]
        rest = http.get(
            "/executions", params={"workflow": "echo", "page_token": body["next_page_token"]}
        ).json()
        assert [e["execution_id"] for e in rest["executions"]] == ids[:1] and rest["next_page_token"] == ""

        bad = http.get("/executions", params={"state": "finished"})
        assert bad.status_code == 422
        assert (
            bad.json()["error"]["code"] == "INVALID_ARGUMENT"
            and "state 'finished'" in bad.json()["error"]["message"]
        )
        assert http.get("/executions", params={"limit": 5000}).status_code == 422

        workflows = http.get("/workflows").json()["workflows"]
        assert "echo" in {w["name"] for w in workflows}
        echo = http.get("/workflows/echo").json()["workflows"]
        assert [(w["version"], w["runtime"]) for w in echo] == [(1, "python")]
        assert http.get("/workflows/nope").status_code == 404
        # The API token is required, as for every client route.
        assert httpx.get(f"{cluster.gateway_url}/executions", trust_env=False, timeout=10).status_code == 401
