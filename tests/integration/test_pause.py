"""`flux worker pause|resume`: a paused worker keeps its stream and running work and takes nothing new."""

from __future__ import annotations

import json

import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = [pytest.mark.integration, pytest.mark.backends("sqlite", "postgres")]

CREATED = control_pb2.EXECUTION_STATE_CREATED
RUNNING = control_pb2.EXECUTION_STATE_RUNNING
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED


def _worker(cluster: Cluster, name: str) -> dict:
    listed = cluster.flux("workers", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (worker,) = [w for w in json.loads(listed.stdout)["workers"] if w["name"] == name]
    return worker


def test_paused_worker_finishes_its_work_takes_nothing_new_until_resumed(cluster: Cluster) -> None:
    cluster.start_worker("held")
    # Long enough to be running still when the pause lands: the CLI alone took over 2 s on a box
    # loaded by a parallel run, and a 2 s body had ended by then ("keeps its 0 running").
    running = cluster.run("sleepy", 10.0, wait=False)
    eventually(lambda: cluster.client.get(running.execution_id).state == RUNNING, what="sleepy to run")

    paused = cluster.flux("worker", "pause", "held")
    assert paused.returncode == 0, paused.stderr
    assert "worker held paused" in paused.stdout and "1 running" in paused.stdout
    later = cluster.run("echo", "later", wait=False)

    # Its running work finishes on it; its stream stays open.
    final = cluster.client.wait(running.execution_id, timeout=30)
    assert (final.state, final.worker) == (COMPLETED, "held")
    listed = _worker(cluster, "held")
    assert (listed["paused"], listed["connected"]) == (True, True)
    table = cluster.flux("workers", "list").stdout
    assert any(line.split()[:2] == ["held", "paused"] for line in table.splitlines()), table

    # New work waits, and explain says why.
    assert cluster.client.get(later.execution_id).state == CREATED
    explained = cluster.flux("execution", "explain", later.execution_id, "--json")
    verdict = json.loads(explained.stdout)
    assert verdict["summary"] == "0/1 workers can run it: 1 is paused", verdict
    assert verdict["infeasible"] is False  # a pause is not permanent: it is waiting, not impossible
    (rejection,) = verdict["workers"][0]["rejections"]
    assert (rejection["reason"], rejection["detail"]) == ("paused", "is paused")

    resumed = cluster.flux("worker", "resume", "held")
    assert resumed.returncode == 0 and "worker held resumed" in resumed.stdout
    done = cluster.client.wait(later.execution_id, timeout=30)
    assert (done.state, done.worker) == (COMPLETED, "held")
    assert _worker(cluster, "held")["paused"] is False


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
def test_pause_over_http_needs_the_api_token_and_names_unknown_workers(cluster: Cluster) -> None:
    cluster.start_worker("web")
    url = cluster.gateway_url
    api = {"authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
    worker = {"authorization": f"Bearer {cluster.token(Role.WORKER)}"}
    with httpx.Client(base_url=url, timeout=10, trust_env=False) as http:
        assert http.post("/workers/web/pause", headers=worker).status_code == 403
        answer = http.post("/workers/web/pause", headers=api)
        assert answer.status_code == 200, answer.text
        assert answer.json()["paused"] is True and answer.json()["connected"] is True
        assert [w["paused"] for w in http.get("/workers", headers=api).json()["workers"]] == [True]
        waiting = cluster.run("echo", 1, wait=False)
        assert cluster.client.get(waiting.execution_id).state == CREATED
        assert http.post("/workers/web/resume", headers=api).json()["paused"] is False
        assert cluster.client.wait(waiting.execution_id, timeout=30).state == COMPLETED
        missing = http.post("/workers/ghost/pause", headers=api)
        assert (
            missing.status_code == 404 and "worker 'ghost' is not known" in missing.json()["error"]["message"]
        )
    refused = cluster.flux("worker", "pause", "ghost")
    assert refused.returncode == 1 and "worker 'ghost' is not known" in refused.stderr
