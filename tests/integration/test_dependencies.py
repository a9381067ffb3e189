"""Dependencies through real processes (issue 44): a dependent waits, runs after its dependency
with its output in ctx.upstream, is cancelled in a cascade when its dependency fails, survives
a restart, and is released across two PostgreSQL replicas; graphs, the CLI and HTTP too."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from flux.errors import InvalidArgument, NotFound
from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = pytest.mark.integration

WORKFLOWS = Path(__file__).with_name("dependency_workflows.py")
FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
CREATED = control_pb2.EXECUTION_STATE_CREATED
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
CANCELLED = control_pb2.EXECUTION_STATE_CANCELLED


@pytest.fixture
def deps(cluster: Cluster) -> Cluster:
    cluster.register(WORKFLOWS)
    cluster.start_worker("w1", "--capacity", "4")
    return cluster


def _gate(tmp_path: Path, name: str = "gate") -> tuple[Path, dict]:
    path = tmp_path / name
    return path, {"gate": str(path), "value": name}


@pytest.mark.backends("sqlite", "postgres")
def test_a_dependent_waits_then_runs_with_the_outputs_upstream(deps: Cluster, tmp_path: Path) -> None:
    client = deps.client
    gate, spec = _gate(tmp_path)
    a = client.run("gated", spec)
    other = client.run("gated", {"gate": str(gate), "value": "other"})
    b = client.run("downstream", 7, after=[a, other.execution_id])
    assert b.after == [a.execution_id, other.execution_id] and b.when == "succeeded"
    assert b.dependencies_waiting == 2
    explained = client.explain(b.execution_id)
    assert explained.summary.startswith("waiting for 2 of 2 dependencies: ")
    assert (
        f"{a.execution_id} RUNNING" in explained.summary or f"{a.execution_id} SCHEDULED" in explained.summary
    )
    assert client.get(b.execution_id).state == CREATED
    gate.touch()
    final = client.wait(b.execution_id, 30)
    assert final.state == COMPLETED
    output = json.loads(final.output_json)
    ended = json.loads(client.get(a.execution_id).output_json)["ended"]
    assert output["upstream"][a.execution_id] == {"value": "gate", "ended": ended}
    assert output["upstream"][other.execution_id]["value"] == "other"
    assert output["started"] >= ended  # never before its dependency ended
    [waiting] = deps.query("SELECT waiting FROM executions WHERE execution_id = ?", b.execution_id)
    assert waiting == (0,)


@pytest.mark.backends("sqlite", "postgres")
@pytest.mark.transports("grpc")
def test_a_failed_dependency_cancels_its_dependents_in_a_cascade(deps: Cluster, tmp_path: Path) -> None:
    client = deps.client
    gate, spec = _gate(tmp_path)
    a = client.run("gated", spec)
    bad = client.run("broken", None, after=[a])
    child = client.run("downstream", None, after=[bad])
    grandchild = client.run("downstream", None, after=[child])
    on_failure = client.run("downstream", "cleanup", after=[bad], when="failed")
    gate.touch()
    assert client.wait(bad.execution_id, 30).state == control_pb2.EXECUTION_STATE_FAILED
    ended = client.wait(child.execution_id, 30)
    assert (ended.state, ended.reason) == (CANCELLED, "dependency")
    assert ended.error.message == f"dependency {bad.execution_id} failed"
    last = client.wait(grandchild.execution_id, 30)
    assert last.error.message == f"dependency {child.execution_id} cancelled"
    assert client.wait(on_failure.execution_id, 30).state == COMPLETED
    # Already finished: resolved at once, either way.
    assert client.run("downstream", None, after=[a], wait=True, timeout=30).state == COMPLETED
    never = client.run("downstream", None, after=[a], when="failed")
    assert (never.state, never.reason) == (CANCELLED, "dependency")


@pytest.mark.transports("grpc")
def test_unknown_dependencies_and_bad_graphs_are_refused_naming_the_item(deps: Cluster) -> None:
    client = deps.client
    with pytest.raises(NotFound, match=r"after\[0\]: execution 'nope' does not exist"):
        client.run("downstream", None, after=["nope"])
    with pytest.raises(InvalidArgument, match="when must be one of"):
        client.run("downstream", None, after=["x"], when="later")
    g = client.graph()
    a = g.add("downstream", 1)
    g.add("downstream", 2, after=[a, "ghost"])
    with pytest.raises(NotFound, match=r"items\[1\].after\[0\]: execution 'ghost' does not exist"):
        g.submit()
    request = control_pb2.RunWorkflowsRequest(
        items=[control_pb2.RunItem(workflow_name="downstream", after_index=[1]),
               control_pb2.RunItem(workflow_name="downstream", after_index=[0])]
    )  # fmt: skip
    with pytest.raises(InvalidArgument, match="is on a cycle"):
        client._call("RunWorkflows", request)
    assert deps.query("SELECT count(*) FROM executions")[0][0] == 0


@pytest.mark.backends("sqlite", "postgres")
@pytest.mark.transports("grpc")
def test_a_graph_in_one_call_runs_in_dependency_order(deps: Cluster) -> None:
    client = deps.client
    g = client.graph()
    extract = [g.add("downstream", {"shard": i}) for i in range(3)]
    merge = g.add("downstream", "merge", after=extract)
    report = g.add("downstream", "report", after=[merge])
    executions = g.submit()
    assert [e.execution_id for e in executions] == [n.execution_id for n in g.nodes]
    final = client.wait(report.execution_id, 30)
    assert final.state == COMPLETED
    merged = json.loads(client.get(merge.execution_id).output_json)
    assert sorted(merged["upstream"]) == sorted(n.execution_id for n in extract)
    assert list(json.loads(final.output_json)["upstream"]) == [merge.execution_id]


@pytest.mark.transports("grpc")
def test_waiting_dependents_survive_a_restart(deps: Cluster, tmp_path: Path) -> None:
    client = deps.client
    gate, spec = _gate(tmp_path)
    a = client.run("gated", spec)
    b = client.run("downstream", None, after=[a])
    deps.kill_server()
    deps.restart_server(*FAST)
    gate.touch()
    with deps.client_for(deps.address) as again:
        assert again.wait(b.execution_id, 60).state == COMPLETED
        assert (
            json.loads(again.get(b.execution_id).output_json)["upstream"][a.execution_id]["value"] == "gate"
        )


@pytest.mark.transports("grpc")
def test_the_cli_and_http_take_after_and_when(deps: Cluster, tmp_path: Path) -> None:
    gate, spec = _gate(tmp_path)
    a = deps.client.run("gated", spec)
    ran = deps.flux("workflow", "run", "downstream", "1", "--after", a.execution_id)
    assert ran.returncode == 0, ran.stderr
    b = ran.stdout.strip()
    answer = httpx.post(
        f"{deps.gateway_url}/workflows/downstream/run",
        json={"input": 2, "after": [a.execution_id, b], "when": "finished"},
        headers={"Authorization": f"Bearer {deps.token(Role.CLIENT)}"},
        timeout=10,
    )
    assert answer.status_code == 202, answer.text
    c = answer.json()
    assert c["after"] == [a.execution_id, b] and c["dependencies_waiting"] == 2
    shown = deps.flux("execution", "show", b)
    assert f"after      {a.execution_id} (waiting for 1 of 1, when succeeded)" in shown.stdout, shown.stdout
    as_json = json.loads(deps.flux("execution", "show", b, "--json").stdout)
    assert (as_json["after"], as_json["when"], as_json["dependencies_waiting"]) == (
        [a.execution_id],
        "succeeded",
        1,
    )
    explained = deps.flux("execution", "explain", b)
    assert "waiting for 1 of 1 dependency: " in explained.stdout, explained.stdout
    bad = deps.flux("workflow", "run", "downstream", "--when", "failed")
    assert bad.returncode != 0 and "--when needs --after" in bad.stderr
    gate.touch()
    assert deps.client.wait(c["execution_id"], 30).state == COMPLETED


def test_a_dependency_ended_on_one_replica_releases_its_dependent_on_the_other(
    tmp_path: Path, pg_url: str
) -> None:
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST)
        c.start_replica(*FAST)
        c.register(WORKFLOWS)
        a_address, b_address = c.address, c.replicas[0][1]
        c.start_worker("wa", "--capacity", "4", servers=[a_address])
        c.start_worker("wb", "--capacity", "4", servers=[b_address])
        gate, spec = _gate(tmp_path)
        with c.client_for(a_address) as on_a, c.client_for(b_address) as on_b:
            first = on_a.run("gated", spec)
            second = on_b.run("downstream", "b", after=[first])
            third = on_a.run("downstream", "c", after=[second])
            eventually(lambda: on_b.explain(second.execution_id).summary.startswith("waiting for 1 of 1"))
            gate.touch()
            assert on_a.wait(third.execution_id, 60).state == COMPLETED
            out = json.loads(on_b.get(second.execution_id).output_json)
            assert first.execution_id in out["upstream"]
    finally:
        c.close()


@pytest.mark.transports("grpc")
def test_another_tenants_execution_is_no_dependency(deps: Cluster) -> None:
    from flux.client import FluxClient
    from flux.security import Credentials

    for args in (("tenant", "create", "ml"), ("tenant", "create", "web")):
        assert deps.flux(*args).returncode == 0
    ml, web = (deps.flux("token", "create", "--tenant", t).stdout.strip() for t in ("ml", "web"))
    with (FluxClient(deps.address, timeout=10, credentials=Credentials(ml, deps.ca)) as as_ml,
          FluxClient(deps.address, timeout=10, credentials=Credentials(web, deps.ca)) as as_web):  # fmt: skip
        theirs = as_ml.run("downstream", "ml's")
        mine = as_web.run("downstream", "web's")
        # Refused as an id that does not exist: another tenant's id tells nothing.
        with pytest.raises(NotFound, match=r"after\[0\]: execution .* does not exist"):
            as_web.run("downstream", None, after=[theirs])
        g = as_web.graph()
        g.add("downstream", None, after=[mine, theirs.execution_id])
        with pytest.raises(NotFound, match=r"items\[0\].after\[1\]"):
            g.submit()
        assert as_web.run("downstream", None, after=[mine], wait=True, timeout=30).state == COMPLETED
        # The cluster admin sees both tenants: it may make one wait on the other.
        both = deps.client.run("downstream", None, after=[theirs, mine], wait=True, timeout=30)
        assert both.state == COMPLETED


@pytest.mark.transports("grpc")
def test_the_asyncio_client_runs_after_and_builds_graphs(deps: Cluster) -> None:
    import asyncio

    import flux.aio

    async def scenario() -> tuple[control_pb2.Execution, control_pb2.Execution]:
        async with flux.aio.FluxClient(deps.address, credentials=deps.credentials(Role.CLIENT)) as client:
            a = await client.run("downstream", 1)
            b = await client.run("downstream", 2, after=[a], wait=True, timeout=30)
            g = client.graph()
            first = g.add("downstream", 3)
            g.add("downstream", 4, after=[first, b])
            _, last = await g.submit()
            return b, await client.wait(last.execution_id, 30)

    b, last = asyncio.run(scenario())
    assert b.state == last.state == COMPLETED
    assert len(json.loads(last.output_json)["upstream"]) == 2
