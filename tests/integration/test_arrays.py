"""Arrays with a throttle (batches) through a real server, gateway and worker processes on SQLite:
``client.map(..., max_concurrent=N)``, ``flux workflow run --many --max-concurrent``, ``flux batch
show|wait|cancel``, the same over gRPC and HTTP, and bad input refused at every entry point.

The bodies are the witness for the throttle: each returns when it started and ended, and no
instant is inside more than ``max_concurrent`` of the batch's intervals. (The replicas' test,
test_replica_arrays.py, samples the database as well.) Named test_arrays: test_batches.py is
about batched worker calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path

import grpc
import httpx
import pytest

import flux.aio
from flux.client import FluxClient
from flux.errors import NotFound
from flux.security import Credentials, Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180), pytest.mark.transports("grpc")]

EXAMPLE = Path(__file__).parents[2] / "examples" / "batches.py"
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED
CANCELLED = control_pb2.EXECUTION_STATE_CANCELLED


@pytest.fixture
def arrays(cluster: Cluster) -> Cluster:
    cluster.register(EXAMPLE)
    cluster.start_worker("w1", "--capacity", "8")
    return cluster


def most_at_once(outputs: Iterable[str]) -> int:
    """The most body intervals (``started``..``ended``) any instant is inside."""
    edges = []
    for output in outputs:
        run = json.loads(output)
        edges += [(run["started"], 1), (run["ended"], -1)]
    held = most = 0
    for _, step in sorted(edges):  # an end sorts before a start at the same instant
        held += step
        most = max(most, held)
    return most


def shards(count: int, seconds: float) -> list[dict]:
    return [{"shard": i, "seconds": seconds} for i in range(count)]


@pytest.mark.transports("grpc", "sse")
def test_map_runs_at_most_max_concurrent_of_a_batch_at_once(arrays: Cluster) -> None:
    client = arrays.client
    runs = client.map("shard", shards(8, 0.3), max_concurrent=2)
    # What map returned before: the executions, in input order, a list.
    assert (
        isinstance(runs, list)
        and len(runs) == 8
        and [r.execution_id for r in runs][0] == runs[0].execution_id
    )
    assert runs.batch_id.startswith("b-") and all(r.batch_id == runs.batch_id for r in runs)
    assert dict(runs[0].flow_keys) == {"batch": runs.batch_id, "batch_max": "2"}
    final = runs.batch.wait(timeout=120)
    assert (final.total, final.completed, final.finished, final.max_concurrent) == (8, 8, True, 2)
    finals = arrays.wait_all([r.execution_id for r in runs], timeout=60)
    assert all(f.state == COMPLETED for f in finals), finals
    assert most_at_once(f.output_json for f in finals) <= 2


def test_a_waiting_member_holds_no_worker_room_nor_blocks_other_work(cluster: Cluster) -> None:
    cluster.register(EXAMPLE)
    cluster.start_worker("w1", "--capacity", "2")
    client = cluster.client
    runs = client.map("shard", shards(5, 3.0), max_concurrent=1)  # 15 s of bodies, one at a time
    other = client.run("shard", {"shard": 99, "seconds": 0}, wait=True, timeout=60)
    assert other.state == COMPLETED
    assert not runs.batch.show().finished  # it ran beside the batch, not after it
    # The last member waits on the batch's budget (12 s of bodies ahead of it), which explain names.
    waiting = client.explain(runs[-1].execution_id).summary
    assert f"batch {runs.batch_id} at 1/1 running" in waiting, waiting
    explained = cluster.flux("execution", "explain", runs[-1].execution_id)
    assert f"batch {runs.batch_id} at 1/1 running" in explained.stdout, explained.stdout
    # The metrics count every batch's budget together (never a label per batch).
    metrics = httpx.get(f"{cluster.gateway_url}/metrics", trust_env=False, timeout=30).text
    assert 'flux_limit_waiting{limit="batch/max_concurrent"}' in metrics, metrics
    assert client.batches.cancel(runs.batch_id).finished


def test_a_batch_over_several_calls_is_one_batch(arrays: Cluster) -> None:
    stub = control_pb2_grpc.ControlServiceStub(arrays.channel(Role.CLIENT))
    first = stub.RunWorkflows(
        control_pb2.RunWorkflowsRequest(
            workflow_name="shard", input_json=['{"shard": 0, "seconds": 0}'] * 3, max_concurrent=1
        )
    )
    second = stub.RunWorkflows(
        control_pb2.RunWorkflowsRequest(
            workflow_name="shard", input_json=['{"shard": 1, "seconds": 0}'] * 2, batch_id=first.batch_id
        )
    )
    assert first.batch_id and second.batch_id == first.batch_id
    assert dict(second.executions[0].flow_keys) == {"batch": first.batch_id, "batch_max": "1"}
    final = arrays.client.batches.wait(first.batch_id, timeout=120)
    assert (final.total, final.completed) == (5, 5)
    # A plain bulk submission makes no batch.
    plain = stub.RunWorkflows(
        control_pb2.RunWorkflowsRequest(workflow_name="shard", input_json=['{"shard": 2}'])
    )
    assert plain.batch_id == "" and plain.executions[0].batch_id == ""


def test_cancel_ends_every_unfinished_member_and_the_batch_takes_no_more(arrays: Cluster) -> None:
    client = arrays.client
    runs = client.map("shard", shards(6, 30.0), max_concurrent=2)
    eventually(lambda: client.batches.get(runs.batch_id).running == 2, timeout=60)
    cancelled = runs.batch.cancel()
    assert (cancelled.cancelled, cancelled.finished) == (6, True) and cancelled.cancelled_at_ms > 0
    finals = arrays.wait_all([r.execution_id for r in runs], timeout=60)
    assert all(f.state == CANCELLED for f in finals)
    stub = control_pb2_grpc.ControlServiceStub(arrays.channel(Role.CLIENT))
    with pytest.raises(grpc.RpcError) as refused:
        stub.RunWorkflows(
            control_pb2.RunWorkflowsRequest(workflow_name="shard", input_json=["{}"], batch_id=runs.batch_id)
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cancelled" in refused.value.details()


def test_the_cli_runs_shows_waits_and_cancels_a_batch(arrays: Cluster, tmp_path: Path) -> None:
    lines = tmp_path / "shards.jsonl"
    lines.write_text("".join(json.dumps(s) + "\n" for s in shards(4, 0.1)))
    ran = arrays.flux(
        "workflow",
        "run",
        "shard",
        "--input-file",
        str(lines),
        "--many",
        "--max-concurrent",
        "2",
        "--print-batch",
    )
    assert ran.returncode == 0, ran.stderr
    batch_id = ran.stdout.strip()
    assert batch_id.startswith("b-") and f"batch {batch_id}: 4 runs, at most 2 at once" in ran.stderr
    waited = arrays.flux("batch", "wait", batch_id, "--json", "--timeout", "120")
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout) | {"created_at_ms": 0} == {
        "batch_id": batch_id, "workflow": "shard", "tenant": "default", "max_concurrent": 2, "total": 4,
        "created": 0, "running": 0, "completed": 4, "failed": 0, "cancelled": 0, "finished": True,
        "created_at_ms": 0, "cancelled_at_ms": None,
    }  # fmt: skip
    shown = arrays.flux("batch", "show", batch_id)
    assert f"batch {batch_id} shard: 4/4 finished (completed 4" in shown.stdout, shown.stdout
    member = arrays.query("SELECT execution_id FROM executions WHERE batch_id = ? LIMIT 1", batch_id)[0][0]
    assert json.loads(arrays.flux("execution", "show", member, "--json").stdout)["batch_id"] == batch_id
    assert f"batch      {batch_id}" in arrays.flux("execution", "show", member).stdout
    # Without --print-batch, stdout keeps one execution id per line; the batch is named on stderr.
    lines.write_text("".join(json.dumps(s) + "\n" for s in shards(3, 30.0)))
    many = arrays.flux(
        "workflow", "run", "shard", "--input-file", str(lines), "--many", "--max-concurrent", "1"
    )
    assert many.returncode == 0 and len(many.stdout.split()) == 3, many
    long_batch = many.stderr.split()[1].rstrip(":")
    cancelled = arrays.flux("batch", "cancel", long_batch, "--json")
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["cancelled"] == 3, cancelled
    timed_out = arrays.flux("batch", "wait", long_batch, "--timeout", "5")
    assert timed_out.returncode == 1  # finished, not every run completed
    missing = arrays.flux("batch", "show", "b-" + "0" * 24)
    assert missing.returncode != 0 and "does not exist" in missing.stderr


def test_bad_max_concurrent_is_refused_at_every_entry_point_naming_the_field(arrays: Cluster) -> None:
    client = arrays.client
    for bad, error in (
        (0, ValueError),
        (-1, ValueError),
        ("4", TypeError),
        (2.5, TypeError),
        (True, TypeError),
    ):
        with pytest.raises(error, match="max_concurrent must be an int between 1 and 1,000,000"):
            client.map("shard", shards(1, 0), max_concurrent=bad)  # type: ignore[arg-type]
    stub = control_pb2_grpc.ControlServiceStub(arrays.channel(Role.CLIENT))
    for fields in ({"max_concurrent": 0}, {"max_concurrent": -3}, {"batch_id": "b-nope"}):
        with pytest.raises(grpc.RpcError) as refused:
            stub.RunWorkflows(
                control_pb2.RunWorkflowsRequest(workflow_name="shard", input_json=["{}"], **fields)
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert next(iter(fields)) in refused.value.details()
    headers = {"Authorization": f"Bearer {arrays.token(Role.CLIENT)}"}
    for bad in (0, "4", 2.5, None):
        body = (
            {"inputs": [{"shard": 0}], "max_concurrent": bad}
            if bad is not None
            else {"inputs": [{}], "max_concurrent": 10**7}
        )
        answer = httpx.post(
            f"{arrays.gateway_url}/workflows/shard/run-many", json=body, headers=headers, trust_env=False
        )
        assert answer.status_code == 422 and "max_concurrent" in answer.text, answer.text
    for bad in ("0", "x", "1.5"):
        cli = arrays.flux("workflow", "run", "shard", "--input-file", "-", "--many", "--max-concurrent", bad)
        assert (
            cli.returncode == 2 and "--max-concurrent must be an int between 1 and 1,000,000" in cli.stderr
        ), cli.stderr
    alone = arrays.flux("workflow", "run", "shard", "{}", "--max-concurrent", "2")
    assert alone.returncode != 0 and "--many" in alone.stderr


def test_batches_over_http(arrays: Cluster) -> None:
    headers = {"Authorization": f"Bearer {arrays.token(Role.CLIENT)}"}
    with httpx.Client(base_url=arrays.gateway_url, headers=headers, trust_env=False, timeout=60) as http:
        accepted = http.post(
            "/workflows/shard/run-many", json={"inputs": shards(3, 0.1), "max_concurrent": 1}
        )
        assert accepted.status_code == 202, accepted.text
        batch_id = accepted.json()["batch_id"]
        assert all(e["batch_id"] == batch_id for e in accepted.json()["executions"])
        shown = http.get(f"/batches/{batch_id}").json()["batch"]
        assert (shown["total"], shown["max_concurrent"]) == (3, 1)
        done = http.get(f"/batches/{batch_id}/wait", params={"timeout": 60}).json()["batch"]
        assert (done["completed"], done["finished"]) == (3, True)
        long = http.post("/workflows/shard/run-many", json={"inputs": shards(2, 30), "batch": True}).json()
        cancelled = http.post(f"/batches/{long['batch_id']}/cancel").json()["batch"]
        assert cancelled["cancelled"] == 2 and cancelled["max_concurrent"] == 0
        assert http.get("/batches/b-" + "1" * 24).status_code == 404


def test_another_tenants_batch_does_not_exist(arrays: Cluster) -> None:
    admin = arrays.client
    admin.tenants.apply([{"name": "ml"}])
    token = admin.tenants.create_token("ml", role="submit")
    runs = admin.map("shard", shards(1, 0), max_concurrent=1)
    with FluxClient(arrays.address, timeout=30, credentials=Credentials(token, arrays.ca)) as ml:
        for call in (ml.batches.get, ml.batches.cancel):
            with pytest.raises(NotFound, match="does not exist"):
                call(runs.batch_id)
        mine = ml.map("shard", shards(1, 0))
        assert ml.batches.wait(mine.batch_id, timeout=60).completed == 1
    assert admin.batches.get(mine.batch_id).tenant == "ml"  # a cluster admin sees every tenant's


def test_the_asyncio_client_maps_a_batch(arrays: Cluster) -> None:
    async def main() -> None:
        async with flux.aio.FluxClient(arrays.address, credentials=arrays.credentials(Role.CLIENT)) as client:
            runs = await client.map("shard", shards(4, 0.1), max_concurrent=2, wait=True, timeout=120)
            assert [json.loads(r.output_json)["shard"] for r in runs] == [0, 1, 2, 3]
            final = await runs.batch.wait(timeout=60)
            assert (final.completed, final.max_concurrent) == (4, 2)
            assert (await client.batches.get(runs.batch_id)).finished

    asyncio.run(main())
