"""Placement policies with a real server and real worker processes (issue 45).

``flux start server --placement binpack`` fills one worker before the next; the default (spread)
alternates; a workflow's own ``placement=`` wins over the server's and is stored and listed; an
invalid value is refused at the CLI, at registration over gRPC and over HTTP, naming the field.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import grpc
import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc
from tests.integration.conftest import WORKFLOWS

pytestmark = [pytest.mark.integration]

RUNNING = control_pb2.EXECUTION_STATE_RUNNING
PACKED = textwrap.dedent(
    """
    import asyncio
    from flux import workflow

    @workflow.with_options(name="packed_sleep", placement="binpack")
    async def packed_sleep(ctx):
        await asyncio.sleep(ctx.input)
    """
)


def _cluster(tmp_path: Path, backend: str, request: pytest.FixtureRequest, *args: str) -> Cluster:
    db = request.getfixturevalue("pg_url") if backend == "postgres" else "flux.db"
    tmp_path.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(tmp_path, db=db)
    cluster.start_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1", *args)
    cluster.register(WORKFLOWS)
    return cluster


def _workers_of(cluster: Cluster, workflow: str, count: int, demand: int | None = None) -> list[str]:
    """Run ``count`` long executions one after the other; the worker each runs on, in order.

    ``demand``: the workers pool ``cpu`` must then want (busy workers: nothing is pending).
    """
    ids = []
    for _ in range(count):
        ids.append(cluster.run(workflow, 60, wait=False).execution_id)
        # Each placed before the next is submitted, so the order of choices is the test's.
        eventually(lambda: cluster.client.get(ids[-1]).state == RUNNING, what=f"{workflow} to run")
    workers = [cluster.client.get(execution_id).worker for execution_id in ids]
    if demand is not None:
        shown = cluster.flux("pool", "show", "cpu", "--json")
        pool = json.loads(shown.stdout)
        assert (pool["busy_workers"], pool["demand_workers"]) == (demand, demand), shown.stdout
    for execution_id in ids:
        cluster.client.cancel(execution_id)
    # Every slot handed back before the next choice is asked for.
    idle = lambda: all(w.active_executions == 0 for w in cluster.client.workers().workers)  # noqa: E731
    eventually(idle, what="the cancelled executions to let go of their workers")
    return workers


def _two_workers(cluster: Cluster) -> None:
    for name in ("a", "b"):
        cluster.start_worker(name, "--capacity", "4", "--label", "flux/pool=cpu")


@pytest.mark.parametrize("backend", ["sqlite"])
def test_spread_alternates_and_binpack_fills_one_worker_first(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    spread = _cluster(tmp_path / "spread", backend, request)
    try:
        _two_workers(spread)
        assert _workers_of(spread, "sleepy", 4, demand=2) == ["a", "b", "a", "b"]
        status = spread.flux("status", "--json")
        assert json.loads(status.stdout)["placement"] == "spread", status.stderr
    finally:
        spread.close()
    packed = _cluster(tmp_path / "packed", backend, request, "--placement", "binpack")
    try:
        _two_workers(packed)
        # Three on one worker, the other idle: the pool wants one worker (KEDA can scale one in).
        assert _workers_of(packed, "sleepy", 3, demand=1) == ["a", "a", "a"]
        assert _workers_of(packed, "sleepy", 5) == ["a", "a", "a", "a", "b"]  # capacity 4, then the next
        shown = packed.flux("status").stdout
        assert "placement   binpack (fullest capable worker first" in shown, shown
    finally:
        packed.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_workflows_own_placement_is_stored_listed_and_wins_over_the_servers(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    cluster = _cluster(tmp_path, backend, request)
    try:
        source = tmp_path / "packed.py"
        source.write_text(PACKED)
        registered = cluster.flux("workflow", "register", str(source))
        assert registered.returncode == 0, registered.stderr
        shown = cluster.flux("workflow", "show", "packed_sleep", "--json")
        assert json.loads(shown.stdout)["versions"][0]["placement"] == "binpack", shown.stdout
        assert "placement    the server default" in cluster.flux("workflow", "show", "sleepy").stdout
        _two_workers(cluster)
        assert _workers_of(cluster, "packed_sleep", 3) == ["a", "a", "a"]
        assert _workers_of(cluster, "sleepy", 2) == ["a", "b"]  # the server's spread, on idle workers again
    finally:
        cluster.close()


def test_invalid_placements_are_refused_at_every_entry(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, "sqlite", None)  # type: ignore[arg-type]
    try:
        started = cluster.flux("start", "server", "--placement", "pack")
        assert started.returncode == 2
        assert (
            "argument --placement: invalid choice: 'pack'" in started.stderr and "'binpack'" in started.stderr
        )

        bad = tmp_path / "bad.py"
        bad.write_text(PACKED.replace('placement="binpack"', 'placement="pack"'))
        registered = cluster.flux("workflow", "register", str(bad))
        assert registered.returncode != 0
        assert "placement must be 'spread'" in registered.stderr and "got 'pack'" in registered.stderr

        workflow = control_pb2.WorkflowMetadata(name="bad", entrypoint="packed_sleep", placement="pack")
        message = control_pb2.RegisterWorkflowRequest(filename="bad.py", source=PACKED, workflows=[workflow])
        with cluster.channel(Role.CLIENT) as channel, pytest.raises(grpc.RpcError) as refused:
            control_pb2_grpc.ControlServiceStub(channel).RegisterWorkflow(message, timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "workflows[0].placement must be 'spread'" in (refused.value.details() or "")

        body = {
            "filename": "bad.py",
            "source": PACKED,
            "workflows": [{"name": "bad", "entrypoint": "packed_sleep", "placement": "pack"}],
        }
        headers = {"authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
        with httpx.Client(base_url=cluster.gateway_url, timeout=10, trust_env=False) as http:
            answer = http.post("/workflows", json=body, headers=headers)
        assert answer.status_code == 422, answer.text  # the gateway maps INVALID_ARGUMENT to 422
        assert "workflows[0].placement must be 'spread'" in answer.text
    finally:
        cluster.close()
