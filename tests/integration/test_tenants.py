"""Tenants and their tokens against real processes: what one tenant's token can see and do.

Both stores keep tenants and token digests; a store from before tenants keeps working
with everything in tenant ``default``, and the server's own API token is a cluster-admin token of it.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from flux.client import FluxClient
from flux.dispatcher.state.tenants import TenantDirectory, digest
from flux.domain.execution import Execution, WorkflowRef
from flux.domain.tenant import Tenant
from flux.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from flux.security import Credentials, Role
from flux.store.base import ExecutionQuery, Store
from flux.store.postgres import PostgresStore
from flux.store.sqlite import SqliteStore
from flux.testing import Cluster
from flux.v1 import control_pb2, control_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.backends("sqlite", "postgres")]


@pytest.fixture
async def store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    opened: Store
    if backend == "postgres":
        opened = PostgresStore(request.getfixturevalue("pg_url"), "test-replica")
    else:
        opened = SqliteStore(tmp_path / "flux.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def _execution(execution_id: str, tenant: str) -> Execution:
    return Execution(
        execution_id=execution_id,
        workflow=WorkflowRef("echo", 1, "0" * 64, "echo"),
        seq=int(execution_id[1:]),
        input_json="null",
        max_attempts=3,
        created_at=1000.0,
        updated_at=1000.0,
        tenant=tenant,
    )


async def test_tenants_tokens_and_execution_tenants_are_stored(store: Store) -> None:
    directory = TenantDirectory(store)
    assert [t.name for t in await directory.list()] == ["default"]
    await directory.create(Tenant.from_dict({"name": "ml", "gpu": 4, "cohort": "research", "weight": 2}))
    with pytest.raises(AlreadyExists):
        await directory.create(Tenant("ml"))
    changed = await directory.update("ml", {"gpu": None, "memory": "8Gi"})
    assert changed.to_dict() == {"name": "ml", "memory": "8Gi", "cohort": "research", "weight": 2}
    assert (await TenantDirectory(store).get("ml")) == changed  # read back from the store
    token, record = await directory.create_token("ml", "read", name="ci")
    found = await store.find_token(digest(token))
    assert found == record and (found.tenant, found.role, found.name) == ("ml", "read", "ci")
    assert token not in record.id and record.id not in digest(token)  # not derived from the secret
    assert await store.find_token(token) is None  # only the digest is kept
    assert (await TenantDirectory(store).caller(token)) is not None
    with pytest.raises(NotFound):
        await directory.create_token("nobody", "submit")
    with pytest.raises(FailedPrecondition):
        await directory.delete("default")

    await store.save(_execution("e1", "ml"))
    await store.save(_execution("e2", "default"))
    stored = await store.get_execution("e1")
    assert stored is not None and stored.tenant == "ml"
    only_ml = await store.list_executions(ExecutionQuery(limit=10, tenant="ml"))
    assert [e.execution_id for e in only_ml] == ["e1"]
    assert len(await store.list_executions(ExecutionQuery(limit=10))) == 2

    await directory.delete("ml")
    assert await store.find_token(digest(token)) is None
    assert await directory.caller(token) is None
    assert [t.name for t in await directory.list()] == ["default"]


@pytest.mark.backends("sqlite")
async def test_a_version_3_sqlite_file_puts_everything_in_tenant_default(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    first = SqliteStore(path)
    await first.open()
    await first.close()
    db = sqlite3.connect(path)
    # As version 3 left it: no column or table that a later version added.
    later = (
        "policy",
        "not_before",
        "reason",
        "attempts",
        "heartbeat",
        "started_at",
        "run_time",
        "flow_keys",
        "batch_id",
        "after_ids",
        "after_when",
        "waiting",
        "gang",
    )
    db.executescript(
        "DROP INDEX executions_by_batch; DROP TABLE batches;"
        + "".join(f"ALTER TABLE executions DROP COLUMN {column};" for column in later)
        + "ALTER TABLE executions DROP COLUMN tenant; ALTER TABLE executions DROP COLUMN trace;"
        "ALTER TABLE workflows DROP COLUMN tenant; ALTER TABLE workflows DROP COLUMN policy;"
        "ALTER TABLE workflows DROP COLUMN flow; ALTER TABLE workflows DROP COLUMN gang;"
        "DROP TABLE tenants; DROP TABLE tokens;"
        "DROP TABLE audit; DROP TABLE limits;"
        "UPDATE meta SET value = '3' WHERE key = 'schema_version';"
        "INSERT INTO executions VALUES ('e1', 1, 'old', 1, 'h', 'old', 1, '', 1, 0, 3, 'null', '', NULL, "
        "'[]', 5.0, 5.0, 0);"
    )
    db.commit()
    db.close()
    store = SqliteStore(path)
    recovered = await store.open()
    try:
        assert [(e.execution_id, e.tenant) for e in recovered.unfinished] == [("e1", "default")]
        assert [t.name for t in await TenantDirectory(store).list()] == ["default"]
    finally:
        await store.close()


RUNNING = (control_pb2.EXECUTION_STATE_SCHEDULED, control_pb2.EXECUTION_STATE_RUNNING)


def _client(cluster: Cluster, token: str) -> FluxClient:
    return FluxClient(cluster.address, timeout=10, credentials=Credentials(token, cluster.ca))


def _ok(result: object) -> str:
    assert result.returncode == 0, result.stderr  # type: ignore[attr-defined]
    return result.stdout  # type: ignore[attr-defined]


@pytest.mark.transports("grpc")
def test_a_tenant_sees_and_cancels_only_its_own_executions(cluster: Cluster, tmp_path: Path) -> None:
    # The server's own token (./.flux/api.token) is a cluster admin: it manages tenants.
    _ok(cluster.flux("tenant", "create", "ml", "--gpu", "4", "--cohort", "research"))
    _ok(cluster.flux("tenant", "create", "web", "--cpu", "32", "--memory", "64Gi"))
    listed = json.loads(_ok(cluster.flux("tenant", "list", "--json")))
    assert [t["name"] for t in listed["tenants"]] == ["default", "ml", "web"]
    ml = _ok(cluster.flux("token", "create", "--tenant", "ml")).strip()
    web = _ok(cluster.flux("token", "create", "--tenant", "web")).strip()
    web_reader = _ok(cluster.flux("token", "create", "--tenant", "web", "--role", "read")).strip()
    refused = cluster.flux("token", "create", "--tenant", "nobody")
    assert refused.returncode != 0 and "tenant 'nobody' does not exist" in refused.stderr

    # No worker: the executions stay pending, so each one can still be cancelled.
    with (
        _client(cluster, ml) as as_ml,
        _client(cluster, web) as as_web,
        _client(cluster, web_reader) as reader,
    ):
        mine = as_ml.run("echo", "ml's")
        theirs = as_web.run("echo", "web's")
        legacy = cluster.client.run("echo", "operator's")  # the server's token: tenant default

        # gRPC: another tenant's execution does not exist, whatever is asked of it.
        for ask in (
            lambda: as_web.get(mine.execution_id),
            lambda: as_web.explain(mine.execution_id),
            lambda: as_web.cancel(mine.execution_id),
            lambda: next(iter(as_web.watch(mine.execution_id, timeout=5))),
            lambda: as_web.wait(mine.execution_id, timeout=5),
            lambda: reader.get(mine.execution_id),
        ):
            with pytest.raises(NotFound):
                ask()
        assert as_web.get(theirs.execution_id).tenant == "web"
        assert (mine.tenant, legacy.tenant) == ("ml", "default")
        assert reader.get(theirs.execution_id).execution_id == theirs.execution_id
        assert {e.execution_id for e in as_web.list_executions().executions} == {theirs.execution_id}
        assert {e.execution_id for e in reader.list_executions().executions} == {theirs.execution_id}
        assert {e.execution_id for e in as_ml.list_executions().executions} == {mine.execution_id}

        # Status: a cluster admin sees every tenant's pending rows; a tenant's token its own rows
        # only (a row names its oldest execution and workflow), while the counts stay everyone's.
        def oldest(client: FluxClient) -> list[str]:
            return sorted(p.oldest_execution_id for p in client.status().pending)

        everyone = {mine.execution_id, theirs.execution_id, legacy.execution_id}
        assert mine.execution_id in oldest(cluster.client) and set(oldest(cluster.client)) <= everyone
        assert oldest(as_web) == [theirs.execution_id]
        assert oldest(as_ml) == [mine.execution_id]
        seen_by_web = as_web.status()
        assert sum(p.count for p in seen_by_web.pending) == 1
        assert sum(seen_by_web.pending_by_reason.values()) == 3  # aggregates name nobody
        # The CLI's JSON, as the review ran it: nothing of ml's in what web's token is shown.
        web_file = tmp_path / "web-status.token"
        web_file.write_text(web + "\n")
        shown = _ok(cluster.flux("status", "--json", "--api-token-file", str(web_file)))
        assert mine.execution_id not in shown and legacy.execution_id not in shown
        assert theirs.execution_id in shown
        everything = {e.execution_id for e in cluster.client.list_executions().executions}
        assert everything == {mine.execution_id, theirs.execution_id, legacy.execution_id}

        # Roles: a read token runs and cancels nothing; only admin tokens manage tenants or workflows.
        with pytest.raises(PermissionDenied, match="read token of tenant web"):
            reader.run("echo", 1)
        with pytest.raises(PermissionDenied):
            reader.cancel(theirs.execution_id)
        with pytest.raises(PermissionDenied, match="needs an admin token"):
            as_ml.register_file(Path(__file__).with_name("workflows.py"))
        assert as_ml.get(mine.execution_id).state == control_pb2.EXECUTION_STATE_CREATED

        # HTTP: the gateway passes each caller's token to the core, which decides.
        def http(token: str, method: str, path: str) -> httpx.Response:
            return httpx.request(
                method,
                f"{cluster.gateway_url}{path}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )

        assert http(web, "GET", f"/executions/{mine.execution_id}").status_code == 404
        assert http(web, "POST", f"/executions/{mine.execution_id}/cancel").status_code == 404
        assert http(web, "GET", f"/executions/{mine.execution_id}/explain").status_code == 404
        listing = http(web, "GET", "/executions").json()
        assert [e["execution_id"] for e in listing["executions"]] == [theirs.execution_id]
        assert http(ml, "GET", f"/executions/{mine.execution_id}").status_code == 200

        # CLI, with a tenant's token in the environment as a user would keep it.
        token_file = tmp_path / "web.token"
        token_file.write_text(web + "\n")
        shown = cluster.flux("execution", "show", mine.execution_id, "--api-token-file", str(token_file))
        assert shown.returncode != 0 and "does not exist" in shown.stderr
        cancelled = cluster.flux("workflow", "cancel", mine.execution_id, "--api-token-file", str(token_file))
        assert cancelled.returncode != 0 and "does not exist" in cancelled.stderr
        mine_file = tmp_path / "ml.token"
        mine_file.write_text(ml + "\n")
        shown = cluster.flux("execution", "show", mine.execution_id, "--api-token-file", str(mine_file))
        assert shown.returncode == 0 and "tenant     ml" in shown.stdout
        denied = cluster.flux("tenant", "list", "--api-token-file", str(token_file))
        assert denied.returncode != 0 and "admin token" in denied.stderr

        # Its own tenant's execution is cancelled; the other tenant's was never touched.
        assert as_web.cancel(theirs.execution_id).state == control_pb2.EXECUTION_STATE_CANCELLED
        assert as_ml.get(mine.execution_id).state == control_pb2.EXECUTION_STATE_CREATED

    # A tenant with unfinished work is not deleted: the dispatcher would hold work of no tenant.
    busy = cluster.flux("tenant", "delete", "ml")
    assert busy.returncode != 0 and "tenant 'ml' has 1 unfinished execution;" in busy.stderr
    cluster.client.cancel(mine.execution_id)
    # Deleting a tenant revokes its tokens at once on this server.
    _ok(cluster.flux("tenant", "delete", "ml"))
    with _client(cluster, ml) as revoked, pytest.raises(Exception, match="invalid"):
        revoked.get(mine.execution_id)


@pytest.mark.transports("grpc")
def test_tenant_fields_are_refused_naming_the_field(cluster: Cluster, tmp_path: Path) -> None:
    bad = cluster.flux("tenant", "create", "ml", "--gpu", "four")
    assert bad.returncode != 0 and "gpu must be a whole number" in bad.stderr
    bad = cluster.flux("tenant", "create", "Bad Name")
    assert bad.returncode != 0 and "is invalid; a tenant name is" in bad.stderr
    bad = cluster.flux("tenant", "create", "ml", "--borrowing-limit", "gpu=2")
    assert bad.returncode != 0 and "borrowing_limit needs a cohort" in bad.stderr
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        "tenants:\n"
        "  - name: ml\n    gpu: 4\n    cohort: research\n    borrowing_limit: {gpu: 2}\n    weight: 2\n"
        "  - name: web\n    cpu: 32\n    memory: 64Gi\n    cohort: research\n"
    )
    assert "tenant web applied" in _ok(cluster.flux("tenant", "apply", str(tenants)))
    shown = json.loads(_ok(cluster.flux("tenant", "show", "ml", "--json")))
    assert shown == {"name": "ml", "gpu": 4, "cohort": "research", "borrowing_limit": {"gpu": 2}, "weight": 2}
    _ok(cluster.flux("tenant", "set", "ml", "--gpu", "6", "--unset", "borrowing_limit"))
    shown = json.loads(_ok(cluster.flux("tenant", "show", "ml", "--json")))
    assert shown == {"name": "ml", "gpu": 6, "cohort": "research", "weight": 2}
    tenants.write_text('{"tenants": [{"name": "ml", "gpu": -1}]}')
    bad = cluster.flux("tenant", "apply", str(tenants))
    assert bad.returncode != 0 and "tenants[0]" in bad.stderr and "gpu" in bad.stderr
    assert cluster.flux("tenant", "show", "nobody").returncode != 0


@pytest.mark.transports("grpc")
async def test_tenants_through_the_python_clients_and_http(cluster: Cluster) -> None:
    from flux.aio import FluxClient as AsyncFluxClient

    admin = cluster.client
    created = admin.tenants.create("ml", gpu=4, cohort="research", borrowing_limit={"gpu": 2})
    assert created.to_dict() == {
        "name": "ml", "gpu": 4, "cohort": "research", "borrowing_limit": {"gpu": 2}, "weight": 1,
    }  # fmt: skip
    with pytest.raises(AlreadyExists):
        admin.tenants.create("ml")
    with pytest.raises(InvalidArgument, match="weight must be a number > 0"):
        admin.tenants.create("web", weight=0)
    assert admin.tenants.set("ml", weight=3).weight == 3
    assert [t.name for t in admin.tenants.apply([{"name": "web", "cpu": 8}])] == ["web"]
    token = admin.tenants.create_token("web", role="read")
    with _client(cluster, token) as reader, pytest.raises(PermissionDenied, match="needs an admin token"):
        reader.tenants.list()

    async with AsyncFluxClient(cluster.address, timeout=10, credentials=cluster.client.credentials) as aio:
        assert [t.name for t in await aio.tenants.list()] == ["default", "ml", "web"]
        assert (await aio.tenants.get("ml")).weight == 3
        await aio.tenants.delete("web")
        with pytest.raises(NotFound):
            await aio.tenants.get("web")

    operator = cluster.client.credentials.token
    async with httpx.AsyncClient(
        base_url=cluster.gateway_url, headers={"Authorization": f"Bearer {operator}"}, timeout=10
    ) as http:
        answer = await http.post("/tenants", json={"name": "web", "quota": {"cpu": "32"}})
        assert answer.status_code == 200, answer.text
        assert answer.json()["tenant"]["quota"] == {"cpu": "32"}
        assert (await http.post("/tenants", json={"name": "web"})).status_code == 409
        bad = await http.post("/tenants", json={"name": "Web"})
        assert bad.status_code == 422 and "tenant name is" in bad.json()["error"]["message"]
        changed = await http.patch("/tenants/web", json={"cpu": None, "gpu": 2})
        assert changed.status_code == 200 and changed.json()["tenant"]["quota"] == {"gpu": "2"}
        names = [t["name"] for t in (await http.get("/tenants")).json()["tenants"]]
        assert names == ["default", "ml", "web"]
        minted = await http.post("/tokens", json={"tenant": "web"})
        assert minted.status_code == 200 and minted.json()["role"] == "submit"
        web = minted.json()["token"]
        assert (await http.get("/tenants", headers={"Authorization": f"Bearer {web}"})).status_code == 403
        assert (await http.delete("/tenants/default")).status_code == 409
        assert (await http.delete("/tenants/web")).status_code == 200
        assert (await http.get("/tenants/web")).status_code == 404


@pytest.mark.transports("grpc")
def test_a_tenant_watching_the_fleet_sees_only_its_own_executions_change(cluster: Cluster) -> None:
    admin = cluster.client
    admin.tenants.apply([{"name": "ml"}, {"name": "web"}])
    ml, web = admin.tenants.create_token("ml"), admin.tenants.create_token("web", role="read")
    credentials = Credentials(web, cluster.ca)
    channel = credentials.channel(cluster.address)
    stub = control_pb2_grpc.ControlServiceStub(channel)
    watch = stub.WatchFleet(control_pb2.WatchFleetRequest(), timeout=60, metadata=credentials.metadata)
    try:
        events = iter(watch)
        assert next(events).WhichOneof("event") == "workers"  # the snapshot: the watch is subscribed
        with _client(cluster, ml) as as_ml, _client(cluster, cluster.client.credentials.token) as operator:
            hidden = as_ml.run("echo", 1)  # first: its event would come first
            seen = operator.run("echo", 2)  # tenant default: the operator's
        # web's own tenant has no executions: a third, its own, is what the watch waits for.
        with _client(cluster, admin.tenants.create_token("web")) as as_web:
            own = as_web.run("echo", 3)
        ids = []
        for event in events:
            kind = event.WhichOneof("event")
            if kind.startswith("execution_"):
                ids.append(getattr(event, kind).execution_id)
                if ids[-1] == own.execution_id:
                    break
        assert ids == [own.execution_id], (hidden.execution_id, seen.execution_id)
    finally:
        watch.cancel()
        channel.close()


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
def test_a_tenant_runs_within_its_quota_and_gets_it_back_when_work_ends(cluster: Cluster) -> None:
    from flux.testing import eventually

    cluster.start_worker("w1", "--cpus", "4")
    _ok(cluster.flux("tenant", "create", "ml", "--cpu", "1"))
    token = _ok(cluster.flux("token", "create", "--tenant", "ml")).strip()
    with _client(cluster, token) as as_ml:
        # Three of one core each on a four-core worker: ml's quota of one core lets one run at a time.
        mine = [as_ml.run("slow_step", 120).execution_id for _ in range(3)]
        # The default tenant has no quota: its work runs beside ml's, on the cores ml may not use.
        other = cluster.client.run("slow_step", 120).execution_id
        eventually(lambda: cluster.client.get(other).state in RUNNING, what="the default tenant's run")
        eventually(lambda: sum(as_ml.get(i).state in RUNNING for i in mine) == 1, what="one of ml's running")
        states = {i: as_ml.get(i).state for i in mine}
        running = next(i for i, state in states.items() if state in RUNNING)
        waiting = [i for i, state in states.items() if state == control_pb2.EXECUTION_STATE_CREATED]
        assert len(waiting) == 2, states
        assert "tenant ml at its cpu quota 1/1" in as_ml.explain(waiting[0]).summary

        # Prometheus: usage against quota, and what waits, per tenant, for a cluster-admin token
        # (or the metrics token: test_metrics_name_tenants_only_for_the_metrics_token).
        def scraped() -> str:
            admin = {"Authorization": f"Bearer {cluster.token(Role.CLIENT)}"}
            return httpx.get(f"{cluster.gateway_url}/metrics", headers=admin, timeout=10).text

        expected = (
            'flux_tenant_usage{resource="cpu",tenant="ml"} 1.0',
            'flux_tenant_quota{resource="cpu",tenant="ml"} 1.0',
            'flux_tenant_pending{tenant="ml"} 2.0',
            'flux_tenant_usage{resource="cpu",tenant="default"} 1.0',
        )
        eventually(lambda: all(line in scraped() for line in expected), what="the tenant metrics")
        assert 'flux_tenant_quota{resource="memory",tenant="ml"}' not in scraped()  # no memory quota
        shown = cluster.client.status().tenants
        assert [(t.name, t.usage.cpu, t.quota.cpu, t.pending) for t in shown if t.name == "ml"] == [
            ("ml", 1, 1, 2)
        ]
        assert {t.name for t in shown} == {"default", "ml"}  # a cluster admin sees every tenant
        assert [t.name for t in as_ml.status().tenants] == ["ml"]  # a tenant, its own usage only

        # Its running one ends: the quota it held goes to the next of ml's, on the same worker or any.
        as_ml.cancel(running)
        eventually(
            lambda: sum(as_ml.get(i).state in RUNNING for i in waiting) == 1, what="the next of ml's running"
        )
        assert sum(as_ml.get(i).state == control_pb2.EXECUTION_STATE_CREATED for i in waiting) == 1
        for execution_id in [*waiting, other]:
            cluster.client.cancel(execution_id)


def _cohort(cluster: Cluster) -> tuple[str, str]:
    """Tenants ml and web, 2 cores of quota each in cohort research; their tokens."""
    _ok(cluster.flux("tenant", "create", "ml", "--cpu", "2", "--cohort", "research"))
    _ok(cluster.flux("tenant", "create", "web", "--cpu", "2", "--cohort", "research"))
    ml = _ok(cluster.flux("token", "create", "--tenant", "ml")).strip()
    web = _ok(cluster.flux("token", "create", "--tenant", "web")).strip()
    return ml, web


def _running(client: FluxClient, ids: list[str]) -> list[str]:
    return [i for i in ids if client.get(i).state in RUNNING]


def _scraped(cluster: Cluster) -> str:
    return httpx.get(f"{cluster.gateway_url}/metrics", timeout=10).text


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
def test_two_teams_in_a_cohort_borrow_what_the_other_leaves_and_reclaim_it_by_preemption(
    cluster: Cluster,
) -> None:
    from flux.testing import eventually

    cluster.start_worker("w1", "--cpus", "8")
    ml, web = _cohort(cluster)
    with _client(cluster, ml) as as_ml, _client(cluster, web) as as_web:
        # web is idle: ml runs its own 2 cores and borrows web's 2, on a worker with 8.
        mine = [as_ml.run("slow_step", 120).execution_id for _ in range(6)]
        eventually(lambda: len(_running(as_ml, mine)) == 4, what="ml's four")
        ran = _running(as_ml, mine)
        waiting = [i for i in mine if i not in ran]
        assert len(waiting) == 2
        summary = as_ml.explain(waiting[0]).summary
        assert summary.startswith(
            "tenant ml at its cpu quota 4/2, borrowing 2 of no limit in cohort research "
            "(the cohort has no cpu left to lend)"
        ), summary

        # web comes back under its quota: ml's newest borrowed execution is preempted (slow_step
        # stops at once, its worker hands it back) and web's runs on the core it frees.
        theirs = as_web.run("slow_step", 120).execution_id
        eventually(lambda: as_web.get(theirs).state in RUNNING, what="web's run on the reclaimed core")
        still = _running(as_ml, mine)
        assert len(still) == 3
        [victim] = [i for i in ran if i not in still]
        assert victim == ran[-1]  # the newest of ml's (all of one priority)
        stopped = as_ml.get(victim)
        assert stopped.state == control_pb2.EXECUTION_STATE_CREATED and stopped.attempt == 1
        counters = cluster.client.status().counters
        assert counters.preempted["reclaim"] == 1 and counters.requeued["preempted"] == 1
        assert counters.requeued["released"] == 0
        assert 'flux_preemptions_total{reason="reclaim"} 1.0' in _scraped(cluster)
        # Back in line at its old place: the first of ml's waiting.
        assert as_ml.explain(victim).queued_ahead == 0
        for execution_id in [*mine, theirs]:
            with contextlib.suppress(FailedPrecondition):
                cluster.client.cancel(execution_id)


@pytest.mark.transports("grpc", "sse")
@pytest.mark.backends("sqlite")
def test_a_preempted_execution_that_finishes_anyway_has_its_late_result_refused(cluster: Cluster) -> None:
    from flux.testing import eventually

    cluster.register(Path(__file__).with_name("stubborn_workflows.py"))
    cluster.start_worker("w1", "--cpus", "4")
    ml, web = _cohort(cluster)
    with _client(cluster, ml) as as_ml, _client(cluster, web) as as_web:
        theirs = [as_web.run("stubborn_step", 120).execution_id for _ in range(4)]
        # Claimed, not only dispatched: preempted before its claim, an execution is handed back
        # unrun (the claim is refused), and there is no late result to refuse.
        eventually(
            lambda: [as_web.get(i).state for i in theirs] == [control_pb2.EXECUTION_STATE_RUNNING] * 4,
            what="web's four claimed, two of them borrowed",
        )
        mine = as_ml.run("slow_step", 120).execution_id
        # web's newest is told to stop; stubborn_step returns anyway and its worker reports the
        # result, which is refused: the execution goes back in line, its room to ml.
        eventually(lambda: as_ml.get(mine).state in RUNNING, what="ml's run on the reclaimed core")
        victim = as_web.get(theirs[3])
        assert victim.state == control_pb2.EXECUTION_STATE_CREATED, victim
        assert victim.attempt == 1 and not victim.output_json
        # Recorded as preempted, and not an attempt used up (it runs again as attempt 1).
        assert [a.reason for a in victim.attempts] == ["preempted"]
        log = cluster.workdir / "worker-w1.log"
        eventually(
            lambda: (
                f"result of {theirs[3]} refused" in log.read_text() and "was preempted" in log.read_text()
            ),
            what="the worker's note of its refused result",
        )
        counters = cluster.client.status().counters
        assert counters.preempted["reclaim"] == 1 and counters.requeued["preempted"] == 1
        # When ml's work ends, the preempted execution is the next to run, as a fresh dispatch.
        as_ml.cancel(mine)
        eventually(lambda: as_web.get(theirs[3]).state in RUNNING, what="the preempted one back on w1")
        assert as_web.get(theirs[3]).attempt == 1
        for execution_id in theirs:
            with contextlib.suppress(FailedPrecondition):
                cluster.client.cancel(execution_id)


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite")
def test_with_preemption_off_a_returning_team_waits_for_borrowed_work_to_end(tmp_path: Path) -> None:
    import time

    from flux.testing import eventually

    from .conftest import WORKFLOWS

    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--preemption", "off", "--safety-tick", "0.5")
        cluster.register(WORKFLOWS)
        cluster.start_worker("w1", "--cpus", "4")
        ml, web = _cohort(cluster)
        with _client(cluster, ml) as as_ml, _client(cluster, web) as as_web:
            theirs = [as_web.run("slow_step", 120).execution_id for _ in range(4)]
            eventually(lambda: len(_running(as_web, theirs)) == 4, what="web's four, two borrowed")
            mine = as_ml.run("slow_step", 120).execution_id
            for _ in range(6):  # several housekeeping steps: nothing is preempted
                time.sleep(0.5)
                assert as_ml.get(mine).state == control_pb2.EXECUTION_STATE_CREATED
            assert len(_running(as_web, theirs)) == 4
            assert "will preempt" not in as_ml.explain(mine).summary
            assert cluster.client.status().counters.preempted["reclaim"] == 0
            # Borrowed work ends: its core goes to ml (the lower share), not to web's next.
            as_web.cancel(theirs[0])
            eventually(lambda: as_ml.get(mine).state in RUNNING, what="ml's run on the freed core")
            for execution_id in [*theirs[1:], mine]:
                cluster.client.cancel(execution_id)
    finally:
        cluster.close()


ML_WORKFLOWS = """
from flux import ExecutionContext, workflow


@workflow.with_options(name="ml_train")
async def ml_train(ctx: ExecutionContext[int]):
    return {"trained": ctx.input}
"""


@pytest.mark.transports("grpc")
@pytest.mark.backends("sqlite", "postgres")
def test_a_tenants_own_workflows_are_its_alone_and_defaults_are_shared(
    cluster: Cluster, tmp_path: Path
) -> None:
    from flux.v1 import control_pb2 as pb

    cluster.start_worker("w1")
    for name in ("ml", "web"):
        _ok(cluster.flux("tenant", "create", name))
    ml_admin = _ok(cluster.flux("token", "create", "--tenant", "ml", "--role", "admin")).strip()
    ml = _ok(cluster.flux("token", "create", "--tenant", "ml")).strip()
    web = _ok(cluster.flux("token", "create", "--tenant", "web")).strip()
    source = tmp_path / "ml_flows.py"
    source.write_text(ML_WORKFLOWS)
    with _client(cluster, ml_admin) as as_ml_admin:  # registered by ml's admin: ml's own
        as_ml_admin.register_file(source)
    with _client(cluster, ml) as as_ml, _client(cluster, web) as as_web:
        seen = {
            name: {w.name for w in c.workflows().workflows} for name, c in (("ml", as_ml), ("web", as_web))
        }
        assert "ml_train" in seen["ml"] and "ml_train" not in seen["web"]
        assert "echo" in seen["ml"] and "echo" in seen["web"]  # the default tenant's: shared
        with pytest.raises(NotFound, match="workflow 'ml_train' is not registered"):
            as_web.run("ml_train", 1)
        with pytest.raises(NotFound):
            as_web.workflows("ml_train")
        done = as_ml.run("ml_train", 7, wait=True, timeout=30)
        assert done.state == pb.EXECUTION_STATE_COMPLETED and json.loads(done.output_json) == {"trained": 7}
    # The cluster admin sees every tenant's, with its owner; a name stays its tenant's.
    [shown] = cluster.client.workflows("ml_train").workflows
    assert shown.tenant == "ml"
    assert "tenant       ml" in _ok(cluster.flux("workflow", "show", "ml_train"))
    with pytest.raises(FailedPrecondition, match="workflow 'ml_train' belongs to another tenant"):
        cluster.client.register_file(source)
