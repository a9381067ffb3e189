"""Metrics, status and structured logs against real server, gateway and worker processes."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flux.security import Role
from flux.testing import Cluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

WORKFLOWS = Path(__file__).with_name("workflows.py")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> tuple[Samples, str]:
    """Every sample of /metrics by (name, sorted labels); fetched without any token, as Prometheus does."""
    answer = httpx.get(f"{url}/metrics", timeout=10, trust_env=False)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }
    return samples, answer.text


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_metrics_move_with_executions_and_pending_reasons_match_explain(cluster: Cluster) -> None:
    cluster.start_worker("grpc-w", "--cpus", "2")
    cluster.start_worker("sse-w", "--cpus", "2", gateway=cluster.gateway_url)
    before, _ = scrape(cluster.gateway_url)
    assert value(before, "flux_workers_connected", transport="grpc") == 1
    assert value(before, "flux_workers_connected", transport="sse") == 1

    ids = [cluster.run("echo", n, wait=False).execution_id for n in range(4)]
    assert {e.state for e in cluster.wait_all(ids, 30)} == {4}  # COMPLETED
    completed = ("flux_executions_finished_total", (("state", "completed"),))

    def caught_up() -> Samples | None:  # the core may answer from a snapshot up to 1 s old
        samples, _ = scrape(cluster.gateway_url)
        return samples if samples[completed] - before[completed] == 4 else None

    after = eventually(caught_up, timeout=10, what="the completions to show")
    for name, labels in [
        ("flux_executions_submitted_total", {}),
        ("flux_claims_total", {}),
        ("flux_executions_finished_total", {"state": "completed"}),
        ("flux_executions", {"state": "completed"}),
        ("flux_dispatch_latency_seconds_count", {"stage": "dispatched"}),
        ("flux_dispatch_latency_seconds_count", {"stage": "started"}),
        ("flux_dispatch_latency_seconds_bucket", {"stage": "started", "le": "+Inf"}),
    ]:
        assert value(after, name, **labels) - value(before, name, **labels) == 4, (name, labels)
    assert value(after, "flux_placements_total") - value(before, "flux_placements_total") >= 4
    assert value(after, "flux_dispatch_latency_seconds_sum", stage="started") > 0
    assert value(after, "flux_allocatable", resource="cpu_cores") == 4

    # Two GPUs: neither CPU-only worker could ever run it.
    stuck = cluster.run("needs_gpu", wait=False).execution_id
    explained = cluster.flux("execution", "explain", stuck, "--json")
    explanation = json.loads(explained.stdout)
    assert explanation["state"] == "CREATED" and explanation["infeasible"] is True

    def pending_by_reason() -> dict[str, float] | None:
        samples, _ = scrape(cluster.gateway_url)
        found = {
            r: value(samples, "flux_pending_executions", reason=r)
            for r in ("busy", "infeasible", "no_worker")
        }
        return found if found["infeasible"] else None  # again, a snapshot up to 1 s old

    assert eventually(pending_by_reason, timeout=10) == {"busy": 0, "infeasible": 1, "no_worker": 0}

    status = cluster.flux("status", "--json")
    assert status.returncode == 0, status.stderr
    body = json.loads(status.stdout)
    [shape] = body["pending"]
    assert (shape["count"], shape["reason"], shape["oldest_execution_id"]) == (1, "infeasible", stuck)
    assert shape["summary"] == explanation["summary"] and shape["requests"]["gpu"] == 2
    assert {w["name"] for w in body["workers"]} == {"grpc-w", "sse-w"}
    assert body["counters"]["completed"] == 4 and body["pending_by_reason"]["infeasible"] == 1
    text = cluster.flux("status").stdout
    assert "pending     1 (0 busy, 1 infeasible, 0 no worker)" in text and explanation["summary"] in text
    table = cluster.flux("workers", "list").stdout.splitlines()
    assert table[0].split()[:4] == ["NAME", "STATE", "TRANSPORT", "LOAD"]
    rows = {line.split()[0]: line for line in table[1:]}
    # Free over advertised beside reserved (free depends on this machine's load; reserved does not).
    assert "/2 (reserved 0)" in rows["grpc-w"] and "sse" in rows["sse-w"].split()

    # Nothing that names a worker, workflow or execution reaches the unauthenticated scrape.
    _, exposed = scrape(cluster.gateway_url)
    for name in ("grpc-w", "sse-w", "needs_gpu", stuck, *ids):
        assert name not in exposed

    # A gateway in its own process reads the same numbers from the core over gRPC.
    _, url = cluster.start_gateway()
    remote, _ = scrape(url)
    assert value(remote, "flux_pending_executions", reason="infeasible") == 1
    assert value(remote, "flux_executions_finished_total", state="completed") == 4


def test_status_needs_the_api_token_and_metrics_does_not(cluster: Cluster) -> None:
    anonymous = httpx.Client(base_url=cluster.gateway_url, timeout=10, trust_env=False)
    assert anonymous.get("/status").status_code == 401
    assert anonymous.get("/metrics").status_code == 200
    token = cluster.token(Role.CLIENT)
    answer = anonymous.get("/status", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200 and "fleet" in answer.json()


def test_json_log_format_writes_parseable_lifecycle_lines(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--log-format", "json", "--ack-deadline", "2", "--grace-period", "2")
        cluster.register(WORKFLOWS)
        cluster.start_worker("w1")
        execution = cluster.run("echo", {"secret": "do-not-log-me"})
        assert execution.state == 4
        log = tmp_path / "server.log"

        def lifecycle() -> list[dict] | None:
            entries = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
            mine = [e for e in entries if e.get("execution_id") == execution.execution_id]
            return mine if any(e["event"] == "completed" for e in mine) else None

        lines = eventually(lifecycle, timeout=10, what="the completed line")
        assert [e["event"] for e in lines] == ["submitted", "dispatched", "claimed", "completed"]
        for entry in lines:
            assert {"ts", "level", "logger", "msg", "event", "execution_id", "workflow", "generation"} <= set(
                entry
            )
            assert (entry["level"], entry["logger"], entry["workflow"]) == ("INFO", "flux.lifecycle", "echo")
        assert lines[1]["worker"] == "w1" and lines[1]["generation"] == 1
        connected = [
            json.loads(line) for line in log.read_text().splitlines() if '"worker_connected"' in line
        ]
        assert connected and connected[0]["worker"] == "w1" and connected[0]["transport"] == "grpc"

        text = log.read_text()
        assert "do-not-log-me" not in text
        # One object per line; the only other lines are the tokens printed once when generated.
        for line in text.splitlines():
            if not line.startswith("generated "):
                json.loads(line)
    finally:
        cluster.close()
