"""Aging and priorities with real processes: a server, a worker process, the CLI and the gateway.

Pass/fail never rests on a timing threshold: waits are bounded by eventually()
and the client's own timeouts, and the order of dispatch is read from what
the workflows record.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]

COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
CREATED = control_pb2.EXECUTION_STATE_CREATED

FAIR = """
import asyncio
import time

from flux import ExecutionContext, Gang, workflow
from flux.domain.resource_request import ResourceRequest


@workflow.with_options(name="one_core", requests=ResourceRequest(cpu=1))
async def one_core(ctx: ExecutionContext[float]):
    started = time.time()
    await asyncio.sleep(ctx.input or 0)
    return {"started": started}


@workflow.with_options(name="four_cores", requests=ResourceRequest(cpu=4), priority=-5)
async def four_cores(ctx: ExecutionContext[None]):
    return {"started": time.time()}


@workflow.with_options(name="gang_four_cores", requests=ResourceRequest(cpu=4), gang=Gang(size=2), priority=-5)
async def gang_four_cores(ctx: ExecutionContext[None]):
    return {"started": time.time(), "worker": ctx.worker_name}


@workflow.with_options(name="hold", requests=ResourceRequest(cpu=1))
async def hold(ctx: ExecutionContext[float]):
    started = time.time()
    await asyncio.sleep(ctx.input or 0)
    return {"started": started}
"""


@pytest.fixture
def fair(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A server with the workflows above; ``starvation_after`` marks the test's --starvation-after.

    Workers see no foreign load (conftest): these tests are about reservations.
    """
    marker = request.node.get_closest_marker("starvation_after")
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--starvation-after", marker.args[0] if marker else "30", "--safety-tick", "0.5")
        path = tmp_path / "fair.py"
        path.write_text(FAIR)
        cluster.register(path)
        yield cluster
    finally:
        cluster.close()


@pytest.mark.starvation_after("1")
def test_a_four_core_execution_is_placed_under_a_steady_one_core_stream(fair: Cluster) -> None:
    fair.start_worker("four", "--cpus", "4", "--capacity", "16")
    client = fair.client
    stop = threading.Event()
    submitted: list[str] = []

    def stream() -> None:
        # Far more one-core work than four cores get through (each runs 1 s): a backlog always waits.
        with fair.client_for(fair.address) as feeder:
            while not stop.wait(0.1) and len(submitted) < 400:
                submitted.extend(feeder.run("one_core", 1.0).execution_id for _ in range(4))

    feeder = threading.Thread(target=stream, daemon=True)
    feeder.start()
    try:
        eventually(lambda: len(submitted) >= 12, what="the stream to start")
        big = client.run("four_cores", None).execution_id
        final = client.wait(big, timeout=90)
    finally:
        stop.set()
        feeder.join(timeout=10)
    assert final.state == COMPLETED, final
    assert final.priority == -5  # the lowest priority, and still not starved
    started_ms = json.loads(final.output_json)["started"] * 1000
    # It did not run because the queue ran dry: one-core work submitted before it started still waits.
    waiting = [
        e
        for e in (client.get(i) for i in list(submitted))
        if e.state == CREATED and e.created_at_ms < started_ms
    ]
    assert waiting


@pytest.mark.starvation_after("1")
def test_a_gang_is_placed_whole_under_a_steady_one_core_stream(fair: Cluster) -> None:
    """A gang of 2 x 4 cores needs both 4-core workers empty at once; a stream of one-core work
    keeps a core busy on each. Starving, it is nominated both workers, which drain, and it runs."""
    fair.start_worker("four-a", "--cpus", "4", "--capacity", "16", "--prefetch", "0")
    fair.start_worker("four-b", "--cpus", "4", "--capacity", "16", "--prefetch", "0")
    client = fair.client
    stop = threading.Event()
    submitted: list[str] = []

    def stream() -> None:
        with fair.client_for(fair.address) as feeder:
            while not stop.wait(0.1) and len(submitted) < 600:
                submitted.extend(feeder.run("one_core", 1.0).execution_id for _ in range(8))

    feeder = threading.Thread(target=stream, daemon=True)
    feeder.start()
    try:
        eventually(lambda: len(submitted) >= 24, what="the stream to start")
        gang = client.run("gang_four_cores", None).execution_id
        final = client.wait(gang, timeout=90)
    finally:
        stop.set()
        feeder.join(timeout=10)
    assert final.state == COMPLETED, final
    assert sorted(json.loads(m.output_json)["worker"] for m in final.gang_members) == ["four-a", "four-b"]
    started_ms = min(json.loads(m.output_json)["started"] for m in final.gang_members) * 1000
    # It did not run because the queue ran dry: one-core work submitted before it started still waits.
    waiting = [
        e
        for e in (client.get(i) for i in list(submitted))
        if e.state == CREATED and e.created_at_ms < started_ms
    ]
    assert waiting


@pytest.mark.parametrize("prefetch", ["0", None], ids=["prefetch 0", "default prefetch"])
def test_a_later_higher_priority_run_goes_first_on_a_busy_worker(fair: Cluster, prefetch: str | None) -> None:
    # --starvation-after 30: the low one never waits that long here, so aging does not put it first.
    # With --prefetch 0 both wait in the server's queue; with the default both are queued at the
    # worker (flux start worker --prefetch), where the higher priority goes ahead too.
    fair.start_worker(
        "busy", "--cpus", "1", "--capacity", "1", *(("--prefetch", prefetch) if prefetch else ())
    )
    client = fair.client
    # The blocker holds the worker until it is cancelled below, not for a fixed time: four CLI
    # processes run meanwhile, and on a loaded host they outlasted a 3 s hold (both then ran).
    blocker = client.run("hold", 120.0).execution_id
    eventually(lambda: client.get(blocker).worker == "busy", what="the blocker to be dispatched")
    low = client.run("hold", 0).execution_id
    cli = fair.flux("workflow", "run", "hold", "0", "--priority", "5")
    assert cli.returncode == 0, cli.stderr
    high = cli.stdout.strip()
    explained = fair.flux("execution", "explain", high)
    if prefetch is None:
        assert explained.stdout.strip() == "queued at worker busy (1st)", explained.stdout
        assert fair.flux("execution", "explain", low).stdout.strip() == "queued at worker busy (2nd)"
    else:
        assert "priority 5; next in line" in explained.stdout, explained.stdout
    state = "created" if prefetch else "scheduled"
    listed = json.loads(fair.flux("execution", "list", "--state", state, "--json").stdout)
    priorities = {
        e["execution_id"]: e["priority"] for e in listed["executions"] if e["execution_id"] != blocker
    }
    assert priorities == {high: 5, low: 0}
    table = fair.flux("execution", "list", "--state", state).stdout
    assert table.splitlines()[0].split()[5] == "PRIORITY"
    client.cancel(blocker)
    done = {e.execution_id: json.loads(e.output_json) for e in fair.wait_all([low, high])}
    assert done[high]["started"] < done[low]["started"]


def test_priority_in_the_http_body_and_out_of_range_refused(fair: Cluster) -> None:
    headers = {"Authorization": f"Bearer {fair.token(Role.CLIENT)}"}
    with httpx.Client(base_url=fair.gateway_url, timeout=10, trust_env=False, headers=headers) as http:
        accepted = http.post("/workflows/hold/run", json={"input": 0, "priority": 7})
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["priority"] == 7
        refused = http.post("/workflows/hold/run", json={"input": 0, "priority": 5000})
        assert refused.status_code == 422, refused.text
        assert "priority" in refused.text and "1000" in refused.text
    declared = fair.client.run("four_cores", None, wait=False)
    assert declared.priority == -5
    cli = fair.flux("workflow", "run", "hold", "0", "--priority", "1001")
    assert cli.returncode != 0 and "--priority must be between -1000 and 1000" in cli.stderr
