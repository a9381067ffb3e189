"""Named limits through a real server, worker and the CLI (SQLite): one limit shared by two
workflows, changed live, applied from a file, shown per key, and the same from ``client.limits``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux.errors import AlreadyExists, InvalidArgument, NotFound
from flux.testing import Cluster
from flux.v1 import control_pb2

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "flow_control.py"
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED


def _overlap(a: dict, b: dict) -> bool:
    return a["started"] < b["ended"] and b["started"] < a["ended"]


def test_one_named_limit_holds_two_workflows_and_is_shown(cluster: Cluster) -> None:
    cluster.register(EXAMPLE)
    cluster.start_worker("w1", "--capacity", "8")
    created = cluster.flux("limit", "create", "openai", "--concurrency", "1")
    assert created.returncode == 0, created.stderr
    assert "limit openai created in tenant default (concurrency 1)" in created.stdout
    client = cluster.client
    runs = [client.run(name, {"seconds": 1.5}) for name in ("summarise", "translate", "summarise")]
    explained = cluster.flux("execution", "explain", runs[2].execution_id)
    assert "limit openai at 1/1 running" in explained.stdout, explained.stdout
    shown = cluster.flux("limit", "show", "openai", "--json")
    assert shown.returncode == 0, shown.stderr
    usage = json.loads(shown.stdout)
    assert usage["concurrency"] == 1 and usage["keys"][0]["in_use"] == 1, usage
    finals = cluster.wait_all([r.execution_id for r in runs], timeout=60)
    assert all(f.state == COMPLETED for f in finals), finals
    bodies = [json.loads(f.output_json) for f in finals]
    assert not any(_overlap(a, b) for i, a in enumerate(bodies) for b in bodies[i + 1 :])


def test_limits_from_a_file_the_client_and_the_cli(cluster: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text(
        "limits:\n  - name: crm\n    concurrency: 1\n    per_key: true\n  - name: mail\n    rate: 10/m\n"
    )
    applied = cluster.flux("limit", "apply", str(path))
    assert applied.returncode == 0, applied.stderr
    assert "limit crm applied (concurrency 1, per key)" in applied.stdout
    listed = cluster.flux("limit", "list")
    assert "crm" in listed.stdout and "10/m" in listed.stdout, listed.stdout
    changed = cluster.flux("limit", "set", "mail", "--burst", "5")
    assert changed.returncode == 0 and "rate 10/m burst 5" in changed.stdout, changed.stderr
    limits = cluster.client.limits
    assert [lim.name for lim in limits.list()] == ["crm", "mail"]
    with pytest.raises(AlreadyExists):
        limits.create("crm", concurrency=2)
    with pytest.raises(InvalidArgument, match="limits nothing"):
        limits.create("empty")
    assert limits.set("crm", concurrency=4).concurrency == 4
    limits.delete("mail")
    with pytest.raises(NotFound):
        limits.get("mail")
    bad = cluster.flux("limit", "create", "x", "--rate", "fast")
    assert bad.returncode != 0 and "rate must be" in bad.stderr, bad.stderr


def test_a_run_key_over_http_and_through_run_many(cluster: Cluster, tmp_path: Path) -> None:
    import httpx

    from flux.security import Role

    cluster.register(EXAMPLE)
    if cluster.gateway_url:
        headers = {"Authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
        with httpx.Client(base_url=cluster.gateway_url, timeout=10, trust_env=False, headers=headers) as http:
            one = http.post("/workflows/per_customer/run", json={"input": {"customer": "x"}, "key": "k-http"})
            assert one.status_code == 202, one.text
            assert one.json()["flow_keys"] == {"concurrency": "k-http"}
            many = http.post(
                "/workflows/per_customer/run-many", json={"inputs": [{"customer": "x"}], "key": "k-m"}
            )
            assert many.status_code in (200, 202), many.text
            assert many.json()["executions"][0]["flow_keys"] == {"concurrency": "k-m"}
            empty = http.post("/workflows/per_customer/run", json={"input": {"customer": "x"}, "key": ""})
            assert empty.status_code == 422
            created = http.post("/limits", json={"name": "openai", "concurrency": 2, "rate": "60/m"})
            assert created.status_code == 200 and created.json()["limit"]["tenant"] == "default", created.text
            assert http.post("/limits", json={"name": "openai", "concurrency": 2}).status_code == 409
            assert [m["name"] for m in http.get("/limits").json()["limits"]] == ["openai"]
            changed = http.patch("/limits/openai", json={"concurrency": 5, "rate": None})
            assert changed.json()["limit"]["concurrency"] == 5 and not changed.json()["limit"].get("rate")
            shown = http.get("/limits/openai")
            assert shown.status_code == 200 and shown.json()["limit"]["name"] == "openai", shown.text
            assert http.delete("/limits/openai").status_code == 200
            assert http.get("/limits/openai").status_code == 404
            assert http.get("/limits", params={"tenant": "nobody"}).status_code == 404
    lines = tmp_path / "inputs.jsonl"
    lines.write_text('{"customer": "a"}\n{"customer": "b"}\n')
    ran = cluster.flux(
        "workflow", "run", "per_customer", "--input-file", str(lines), "--many", "--key", "k-cli"
    )
    assert ran.returncode == 0, ran.stderr
    for execution_id in ran.stdout.split():
        assert dict(cluster.client.get(execution_id).flow_keys) == {"concurrency": "k-cli"}
