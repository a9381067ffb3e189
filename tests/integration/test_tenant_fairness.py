"""Issue 40 against real processes: request-less work holds execution slots, and one tenant's
backlog cannot lock the others out of submitting.

- ``solo`` (one core) filled a worker's 8 slots with work that requests nothing, and ``ml``,
  under its quota, waited "at capacity (8/8 executions)" with nothing preempted: with an
  ``executions`` quota, solo's request-less work is borrowed slots, reclaimed by preemption.
- With ``--max-pending 50``, 50 inputs of ``solo`` refused ``ml``'s next run: now each tenant
  without its own ``max_pending`` gets a fair share of the server's limit, and a refusal names it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
import pytest

from flux.client import FluxClient
from flux.errors import FailedPrecondition, ResourceExhausted
from flux.security import Credentials, Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2
from tests.integration.conftest import WORKFLOWS

pytestmark = [pytest.mark.integration]

RUNNING = (control_pb2.EXECUTION_STATE_SCHEDULED, control_pb2.EXECUTION_STATE_RUNNING)


def _ok(result: object) -> str:
    assert result.returncode == 0, result.stderr  # type: ignore[attr-defined]
    return result.stdout  # type: ignore[attr-defined]


def _client(cluster: Cluster, token: str) -> FluxClient:
    return FluxClient(cluster.address, timeout=10, credentials=Credentials(token, cluster.ca))


def _token(cluster: Cluster, tenant: str) -> str:
    return _ok(cluster.flux("token", "create", "--tenant", tenant)).strip()


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
def test_request_less_work_holds_slots_and_a_tenant_under_its_quota_reclaims_them(cluster: Cluster) -> None:
    cluster.start_worker("w1", "--cpus", "8", "--capacity", "8")
    _ok(cluster.flux("tenant", "create", "solo", "--cpu", "1", "--executions", "1", "--cohort", "team"))
    _ok(cluster.flux("tenant", "create", "ml", "--cpu", "2", "--executions", "7", "--cohort", "team"))
    with _client(cluster, _token(cluster, "solo")) as solo, _client(cluster, _token(cluster, "ml")) as ml:
        # ml is idle: solo runs 7 request-less executions and a cpu=1 one, every slot of w1,
        # each slot above its own one borrowed from ml's 7.
        mine = [solo.run("sleepy", 120).execution_id for _ in range(7)]
        mine.append(solo.run("slow_step", 120).execution_id)
        eventually(lambda: sum(solo.get(i).state in RUNNING for i in mine) == 8, what="solo's eight")
        extra = solo.run("sleepy", 120).execution_id
        summary = solo.explain(extra).summary
        assert summary.startswith(
            "tenant solo at its executions quota 8/1, borrowing 7 of no limit in cohort team "
            "(the cohort has no executions left to lend)"
        ), summary
        usage = {t.name: t for t in cluster.client.status().tenants}
        assert usage["solo"].usage.executions == 8 and usage["solo"].quota.executions == 1
        # Per-tenant series are for a cluster-admin (or the metrics) token only.
        admin = {"Authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
        metrics = httpx.get(f"{cluster.gateway_url}/metrics", headers=admin, timeout=10).text
        assert 'flux_tenant_usage{resource="executions",tenant="solo"} 8.0' in metrics
        assert 'flux_tenant_quota{resource="executions",tenant="solo"} 1.0' in metrics

        # ml, using 0 of its 2 cores and 0 of its 7 slots, preempts solo's newest borrowed slot.
        theirs = ml.run("slow_step", 120).execution_id
        eventually(lambda: ml.get(theirs).state in RUNNING, what="ml's run on the reclaimed slot")
        assert sum(solo.get(i).state in RUNNING for i in mine) == 7
        assert cluster.client.status().counters.preempted["reclaim"] == 1
        for execution_id in [*mine, extra, theirs]:
            with contextlib.suppress(FailedPrecondition):
                cluster.client.cancel(execution_id)


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
def test_an_executions_quota_outside_a_cohort_leaves_the_slots_to_others(cluster: Cluster) -> None:
    cluster.start_worker("w1", "--cpus", "8", "--capacity", "8")
    _ok(cluster.flux("tenant", "create", "solo", "--cpu", "1", "--executions", "2"))
    _ok(cluster.flux("tenant", "create", "ml", "--cpu", "2"))
    with _client(cluster, _token(cluster, "solo")) as solo, _client(cluster, _token(cluster, "ml")) as ml:
        mine = [solo.run("sleepy", 120).execution_id for _ in range(8)]
        eventually(lambda: sum(solo.get(i).state in RUNNING for i in mine) == 2, what="solo's two")
        waiting = [i for i in mine if solo.get(i).state not in RUNNING]
        assert solo.explain(waiting[0]).summary.startswith("tenant solo at its executions quota 2/2")
        theirs = ml.run("slow_step", 120).execution_id
        eventually(lambda: ml.get(theirs).state in RUNNING, what="ml admitted beside solo")
        # Over HTTP the tenant bodies carry the new fields too.
        admin = {"Authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
        changed = httpx.patch(
            f"{cluster.gateway_url}/tenants/ml",
            json={"executions": 3, "max_pending": 10, "max_pending_bytes": "1Mi"},
            headers=admin,
            timeout=10,
        )
        assert changed.status_code == 200, changed.text
        read = httpx.get(f"{cluster.gateway_url}/tenants/ml", headers=admin, timeout=10).json()["tenant"]
        assert int(read["quota"]["executions"]) == 3
        assert (int(read["max_pending"]), int(read["max_pending_bytes"])) == (10, 1024 * 1024)
        assert sum(solo.get(i).state in RUNNING for i in mine) == 2
        for execution_id in [*mine, theirs]:
            with contextlib.suppress(FailedPrecondition):
                cluster.client.cancel(execution_id)


@pytest.mark.backends("sqlite", "postgres")
def test_one_tenants_backlog_leaves_room_for_the_others(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    db = request.getfixturevalue("pg_url") if backend == "postgres" else "flux.db"
    cluster = Cluster(tmp_path, db=db)
    try:
        cluster.start_server("--max-pending", "50")
        cluster.register(WORKFLOWS)
        _ok(cluster.flux("tenant", "create", "solo"))
        _ok(cluster.flux("tenant", "create", "ml"))
        solo_token, ml_token = _token(cluster, "solo"), _token(cluster, "ml")
        with _client(cluster, solo_token) as solo, _client(cluster, ml_token) as ml:
            # Alone, solo may fill all but 1/16 of the server's room: 47 of 50 (no worker: all pending).
            solo.map("echo", range(40))
            with pytest.raises(
                ResourceExhausted,
                match=r"tenant solo has 40 unfinished executions; its limit is 47; these 8 would pass it",
            ):
                solo.map("echo", range(8))  # bulk: all or nothing
            for i in range(7):
                solo.run("echo", i)
            with pytest.raises(ResourceExhausted) as refused:
                solo.run("echo", 47)
            assert "tenant solo has 47 unfinished executions; its limit is 47" in str(refused.value)
            assert "flux tenant set solo --max-pending N" in str(refused.value)
            waited = cluster.flux("workflow", "run", "echo", "1", "--api-token", solo_token)  # run and wait
            assert waited.returncode != 0 and "tenant solo has 47 unfinished executions" in waited.stderr

            # ml still submits, one by one and in bulk, up to what the server's limit leaves.
            ml.run("echo", 1)
            ml.map("echo", range(2))
            with pytest.raises(
                ResourceExhausted, match=r"50 executions are unfinished; the limit is 50 \(--max-pending\)"
            ):
                ml.run("echo", 4)

            # A tenant's own max_pending replaces its share, and its refusal names it.
            _ok(cluster.flux("tenant", "set", "ml", "--max-pending", "3", "--max-pending-bytes", "1Gi"))
            shown = _ok(cluster.flux("tenant", "show", "ml", "--json"))
            assert '"max_pending": 3' in shown and '"max_pending_bytes": "1Gi"' in shown
            with pytest.raises(
                ResourceExhausted,
                match=r"tenant ml has 3 unfinished executions; its limit is 3 \(its max_pending",
            ):
                ml.run("echo", 5)
    finally:
        cluster.close()
