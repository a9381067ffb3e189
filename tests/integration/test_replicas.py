"""Several server replicas on one PostgreSQL database: real servers, workers and PostgreSQL.

The database is the witness: ``dispatches`` records every claim a replica made,
keyed by (execution, generation), and ``executions`` the one recorded result.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from flux.errors import FluxError
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

from .conftest import WORKFLOWS
from .test_control_plane import max_overlap, output

pytestmark = pytest.mark.integration

FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
COMPLETED = control_pb2.EXECUTION_STATE_COMPLETED


@pytest.fixture
def replicas(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    """Two replicas (the cluster's server and ``replicas[0]``) with the test workflows registered."""
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST)
        c.start_replica(*FAST)
        c.register(WORKFLOWS)
        yield c
    finally:
        c.close()


def rows(url: str, query: str) -> list[tuple]:
    with psycopg.connect(url) as db:
        return db.execute(query).fetchall()


def finished(url: str) -> int:
    return rows(url, "SELECT count(*) FROM executions WHERE state >= 4")[0][0]


def test_executions_flow_through_either_replica_without_duplicate_dispatch(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    for name, server in (("wa1", a), ("wa2", a), ("wb1", b), ("wb2", b)):
        replicas.start_worker(name, "--cpus", "4", "--capacity", "32", servers=[server])
    total = 2000
    ids: list[str] = []
    with replicas.client_for(a) as ca, replicas.client_for(b) as cb:
        for i in range(total):
            ids.append((ca if i % 2 else cb).run("echo", i, wait=False).execution_id)
        eventually(lambda: finished(replicas.db) == total, timeout=240, interval=0.5, what="all executions")
        # Status and results read through either replica, whoever ran them.
        for execution_id in ids[:20]:
            assert ca.get(execution_id).state == COMPLETED
            assert cb.get(execution_id).state == COMPLETED
    dispatches = rows(replicas.db, "SELECT execution_id, worker, replica FROM dispatches")
    per_execution = Counter(execution_id for execution_id, _, _ in dispatches)
    assert set(per_execution) == set(ids)
    assert max(per_execution.values()) == 1, "an execution was dispatched twice"
    # Either replica lists the whole fleet.
    with replicas.client_for(a) as ca, replicas.client_for(b) as cb:
        for client in (ca, cb):
            listed = client.workers().workers
            assert [(w.name, w.connected, w.resources.cpu_total) for w in listed] == [
                ("wa1", True, 4), ("wa2", True, 4), ("wb1", True, 4), ("wb2", True, 4)
            ]  # fmt: skip
    # Both replicas dispatched, each to its own workers only. How a replica's work splits between
    # its two workers is the least-loaded rule's business: ties go by name, so a quick one may take all.
    workers_of: dict[str, set[str]] = {}
    for _, worker, replica in dispatches:
        workers_of.setdefault(replica, set()).add(worker)
    assert len(workers_of) == 2
    sides = sorted(",".join(sorted({worker[:2] for worker in workers})) for workers in workers_of.values())
    assert sides == ["wa", "wb"]
    states = rows(replicas.db, "SELECT state, count(*) FROM executions GROUP BY state")
    assert states == [(4, total)]
    outputs = rows(replicas.db, "SELECT input_json, output_json FROM executions")
    assert all(json.loads(out)["input"] == json.loads(inp) for inp, out in outputs)


def test_reservations_hold_whichever_replica_accepted_the_work(replicas: Cluster) -> None:
    b = replicas.replicas[0][1]
    replicas.start_worker("four-cores", "--cpus", "4")  # on the first replica
    with replicas.client_for(b) as cb:
        ids = [
            (replicas.client if i % 2 else cb).run("needs_cpu", 0.4, wait=False).execution_id
            for i in range(12)
        ]
        records = [output(cb.wait(i, 60)) for i in ids]
    assert all(r["worker"] == "four-cores" for r in records)
    assert 1 <= max_overlap(records) <= 2


def test_pending_work_is_explained_and_cancelled_through_another_replica(replicas: Cluster) -> None:
    b = replicas.replicas[0][1]
    replicas.start_worker("small", "--cpus", "2")  # on the first replica; nobody has 8 cores
    with replicas.client_for(b) as cb:
        pending = cb.run("needs_cpu_8", wait=False)
        explanation = cb.explain(pending.execution_id)
        assert explanation.infeasible
        assert [w.worker for w in explanation.workers] == ["small"]
        assert explanation.summary == "0/1 workers can run it: 1 has only 2 cores"
        # Running work held by the first replica, cancelled through the second.
        running = replicas.run("sleepy", 30, wait=False)
        eventually(lambda: cb.get(running.execution_id).state == control_pb2.EXECUTION_STATE_RUNNING)
        assert cb.cancel(running.execution_id).state == control_pb2.EXECUTION_STATE_CANCELLED
        assert cb.cancel(pending.execution_id).state == control_pb2.EXECUTION_STATE_CANCELLED
    # The worker stopped it and is free again.
    assert output(replicas.run("echo", 1))["worker"] == "small"
    assert replicas.client.get(running.execution_id).state == control_pb2.EXECUTION_STATE_CANCELLED


def test_a_worker_name_is_held_across_replicas(replicas: Cluster) -> None:
    replicas.start_worker("unique")  # on the first replica
    b = replicas.replicas[0][1]
    impostor = replicas.start_worker("unique", servers=[b], wait=False)
    time.sleep(1.5)  # it keeps being refused; it must not take the name over
    held_by = rows(replicas.db, "SELECT r.address FROM workers w JOIN replicas r ON r.id = w.replica")
    assert held_by == [(replicas.address,)]
    with replicas.client_for(b) as cb:
        assert [(w.name, w.connected) for w in cb.workers().workers] == [("unique", True)]
    assert replicas.worker_connected("unique")
    assert output(replicas.run("echo", 1))["worker"] == "unique"
    impostor.kill()
    log = (replicas.workdir / "worker-unique.log").read_text()
    assert "is held by a live stream on another replica" in log


def test_replica_killed_under_load_loses_nothing_and_records_once(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    # Workers prefer the first replica and fall back to the second.
    for name in ("w1", "w2", "w3"):
        replicas.start_worker(name, "--cpus", "4", "--capacity", "4", servers=[a, b])
    accepted: list[str] = []
    with replicas.client_for(b) as cb:
        for i in range(120):
            client = replicas.client if i % 2 else cb
            if i == 60:
                replicas.server.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
                replicas.server.wait(timeout=10)  # type: ignore[union-attr]
            try:
                accepted.append(client.run("sleepy", 0.3, wait=False).execution_id)
            except FluxError:
                assert client is replicas.client, "the surviving replica refused a submission"
        assert len(accepted) >= 90
        eventually(lambda: not unfinished(replicas.db), timeout=90, interval=0.5,
                   what=lambda: f"unfinished executions: {unfinished(replicas.db)}")  # fmt: skip
        # Through the surviving replica (its answer may trail the database by a commit).
        results = [cb.wait(i, 30) for i in accepted]
    assert [r.state for r in results] == [COMPLETED] * len(accepted)
    # Recovered through the second replica: the workers moved there, or the sweep requeued.
    assert {output(r)["worker"] for r in results} <= {"w1", "w2", "w3"}
    # A submission the killed replica stored but could not answer is run too; every row has one result.
    recorded = dict(rows(replicas.db, "SELECT execution_id, state FROM executions"))
    assert set(accepted) <= set(recorded)
    assert set(recorded.values()) == {4}
    generations = rows(replicas.db, "SELECT execution_id, generation FROM dispatches")
    assert len(generations) == len(set(generations))  # a dispatch per generation, never two


def test_a_row_a_live_replica_owns_but_no_longer_tracks_is_requeued_and_runs(replicas: Cluster) -> None:
    # As a race between a replica's own steps once left it: the database says a live replica
    # dispatched the execution; that replica holds nothing of it. Its audit gives the row back.
    execution_id = replicas.client.run("echo", "orphan", wait=False).execution_id  # no worker yet
    owner = rows(replicas.db, "SELECT id FROM replicas ORDER BY id LIMIT 1")[0][0]
    changed = rows(
        replicas.db,
        f"UPDATE executions SET state = 2, worker = 'gone', owner = '{owner}', generation = generation + 1 "
        f"WHERE execution_id = '{execution_id}' AND state = 1 RETURNING generation",
    )
    assert changed == [(1,)]
    eventually(
        lambda: (
            rows(replicas.db, f"SELECT state, owner FROM executions WHERE execution_id = '{execution_id}'")
            == [(1, "")]
        ),
        timeout=30,
        what="the orphaned row back in line",
    )
    replicas.start_worker("w1")
    final = replicas.client.wait(execution_id, 30)
    assert (final.state, final.worker, final.attempt) == (COMPLETED, "w1", 1)


def test_a_replica_restarted_on_its_ports_gets_its_workers_back(replicas: Cluster) -> None:
    # Cluster.restart_replica (the chaos run's replica_kill): same gRPC and HTTP ports, so a
    # worker that knows only that replica, over either transport, returns to it on its own.
    process, address, gateway = replicas.replicas[0]
    replicas.start_worker("only-b", servers=[address])
    replicas.start_worker("only-b-sse", gateway=gateway)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    assert replicas.restart_replica(0, *FAST) == address
    assert replicas.replicas[0][1:] == (address, gateway) and replicas.replicas[0][0] is not process
    with replicas.client_for(address) as client:
        eventually(
            lambda: {"only-b", "only-b-sse"} <= {w.name for w in client.workers().workers if w.connected},
            timeout=30,
            what="both workers back on the restarted replica",
        )
        final = client.run("echo", "back", wait=True, timeout=30)
    assert final.state == COMPLETED and final.worker in {"only-b", "only-b-sse"}


def unfinished(url: str) -> list[tuple]:
    return rows(url, "SELECT execution_id, state, worker, owner, generation FROM executions WHERE state < 4")


def test_a_workflow_version_registered_through_one_replica_runs_through_another(replicas: Cluster) -> None:
    b = replicas.replicas[0][1]
    replicas.start_worker("any", servers=[b])
    # Changed source (identical source would be the same version), registered through the first replica.
    changed = replicas.workdir / "workflows_v2.py"
    changed.write_text(WORKFLOWS.read_text() + "\n# version 2\n")
    replicas.register(changed)
    with replicas.client_for(b) as cb:
        done = cb.run("echo", "v2", version=2, wait=True, timeout=30)
        assert (done.state, done.workflow.version, output(done)["worker"]) == (COMPLETED, 2, "any")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        # Nothing listens on port 1: refused at once. The password never reaches the terminal.
        (
            "postgresql://flux:s3cret@127.0.0.1:1/flux",
            "could not connect to PostgreSQL at postgresql://flux:***@127.0.0.1:1/flux",
        ),
        ("postgresql://flux@127.0.0.1/flux?nosuchoption=1", "is not a PostgreSQL URL"),
    ],
)
def test_a_database_that_cannot_be_used_is_a_one_line_error(tmp_path: Path, url: str, says: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flux", "start", "server", "--db", url, "--grpc-port", "0", "--no-http"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert says in result.stderr
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr


def test_pause_through_one_replica_holds_a_worker_connected_to_another(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    replicas.start_worker("far", servers=[a])
    with replicas.client_for(a) as ca, replicas.client_for(b) as cb:
        assert cb.pause_worker("far").paused  # b does not hold its stream: the database carries it
        eventually(lambda: [w.paused for w in ca.workers().workers] == [True], what="a to apply the pause")
        eventually(lambda: [w.paused for w in cb.workers().workers] == [True], what="b to list it paused")
        waiting = cb.run("echo", "held", wait=False)
        eventually(lambda: "1 is paused" in cb.explain(waiting.execution_id).summary, what="explain on b")
        assert ca.get(waiting.execution_id).state == control_pb2.EXECUTION_STATE_CREATED
        # Listings through either replica cover the whole database.
        for client in (ca, cb):
            listed = client.list_executions(workflow="echo").executions
            assert [e.execution_id for e in listed] == [waiting.execution_id]
        cb.resume_worker("far")
        final = ca.wait(waiting.execution_id, timeout=30)
        assert (final.state, final.worker) == (COMPLETED, "far")


def _cli_json(replicas: Cluster, server: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "flux", *args, "--json"],
        cwd=replicas.workdir,
        env={**os.environ, "FLUX_SERVER": server},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_status_and_explain_count_the_same_fleet_on_every_replica(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    replicas.start_worker("wa", "--cpus", "2", servers=[a])
    replicas.start_worker("wb", "--cpus", "4", servers=[b])
    with replicas.client_for(b) as cb:
        eventually(lambda: len(cb.workers().workers) == 2, what="both workers in the directory")
        pending = cb.run("needs_cpu_8", wait=False).execution_id  # nobody has 8 cores
    for server in (a, b):
        # Each replica holds one worker's stream; both commands must count the other's too.
        explained = _cli_json(replicas, server, "execution", "explain", pending)
        assert sorted(w["worker"] for w in explained["workers"]) == ["wa", "wb"]
        eventually(
            lambda server=server: (
                _cli_json(replicas, server, "status")["pending_by_reason"]["infeasible"] == 1
            ),
            what=f"the pending execution mirrored on {server}",
        )
        status = _cli_json(replicas, server, "status")
        assert sorted(w["name"] for w in status["workers"]) == ["wa", "wb"]
        fleet = status["fleet"]
        assert (fleet["connected"], fleet["allocatable"]["cpu"]) == (2, 6)
        assert status["pending_by_reason"] == {"busy": 0, "infeasible": 1, "no_worker": 0}


def test_a_claim_its_replica_died_before_storing_is_claimed_again_not_rerun(replicas: Cluster) -> None:
    a, b = replicas.address, replicas.replicas[0][1]
    replicas.start_worker("w1", servers=[a, b])  # on a, falling back to b
    execution = replicas.run("sleepy", 5.0, wait=False)
    eventually(
        lambda: (
            rows(replicas.db, f"SELECT state FROM executions WHERE execution_id='{execution.execution_id}'")
            == [(control_pb2.EXECUTION_STATE_RUNNING,)]
        ),
        what="the claim stored",
    )
    replicas.server.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    replicas.server.wait(timeout=10)  # type: ignore[union-attr]
    # As if a had answered the claim and died before its write: the row still says SCHEDULED.
    (generation,) = rows(
        replicas.db,
        f"UPDATE executions SET state={control_pb2.EXECUTION_STATE_SCHEDULED} "
        f"WHERE execution_id='{execution.execution_id}' RETURNING generation",
    )[0]
    with replicas.client_for(b) as cb:
        final = cb.wait(execution.execution_id, 60)
    # b adopted the dispatch as unclaimed with a 2 s ack deadline; the worker, back on b, claimed
    # it again, so the run that was going finished it instead of a rerun after the deadline.
    assert final.state == COMPLETED
    assert (final.generation, final.attempt, final.worker) == (generation, 1, "w1")
    assert output(final)["attempt"] == 1


def test_a_tenants_quota_holds_across_replicas_each_with_its_own_worker(replicas: Cluster) -> None:
    from flux.client import FluxClient
    from flux.security import Credentials

    a, b = replicas.address, replicas.replicas[0][1]
    replicas.start_worker("wa", "--cpus", "4", servers=[a])
    replicas.start_worker("wb", "--cpus", "4", servers=[b])
    made = replicas.flux("tenant", "create", "ml", "--cpu", "3")
    assert made.returncode == 0, made.stderr
    token = replicas.flux("token", "create", "--tenant", "ml").stdout.strip()
    with replicas.client_for(b) as admin_b:  # terms made through one replica apply on the other at once
        eventually(
            lambda: any(t.name == "ml" and t.quota.cpu == 3 for t in admin_b.status().tenants),
            what="replica b to know ml's quota",
        )

    def held() -> list[tuple]:  # type: ignore[type-arg]
        return rows(replicas.db, "SELECT worker FROM executions WHERE tenant = 'ml' AND state IN (2, 3)")

    # Each replica alone holds only what its own worker runs, and would let 3 run there: the
    # claim checks the tenant's usage in the database, so 3 run in all.
    with (
        FluxClient(a, timeout=10, credentials=Credentials(token, replicas.ca)) as ca,
        FluxClient(b, timeout=10, credentials=Credentials(token, replicas.ca)) as cb,
    ):
        ids = [(ca if i % 2 else cb).run("slow_step", 120).execution_id for i in range(8)]
        eventually(lambda: len(held()) == 3, what="three of ml's running")
        for _ in range(10):  # and no more, whichever replica's safety tick comes next
            time.sleep(0.2)
            assert len(held()) == 3, held()
        waiting = [i for i in ids if ca.get(i).state == control_pb2.EXECUTION_STATE_CREATED]
        assert len(waiting) == 5
        summary = cb.explain(waiting[0]).summary
        assert "tenant ml at its cpu quota 3/3" in summary, summary

        # What one replica's worker frees goes to ml's next, whichever replica places it.
        running = [i for i in ids if i not in waiting]
        ca.cancel(running[0])
        eventually(lambda: sum(ca.get(i).state != control_pb2.EXECUTION_STATE_CREATED for i in waiting) == 1,
                   what="the next of ml's running")  # fmt: skip
        assert len(held()) == 3
        for execution_id in ids:
            with contextlib.suppress(FluxError):
                ca.cancel(execution_id)


def _two_teams(replicas: Cluster) -> tuple[str, str]:
    """Tenants ml and web, 4 cores of quota each in cohort research, known to both replicas; their tokens."""
    for name in ("ml", "web"):
        made = replicas.flux("tenant", "create", name, "--cpu", "4", "--cohort", "research")
        assert made.returncode == 0, made.stderr
    ml, web = (replicas.flux("token", "create", "--tenant", n).stdout.strip() for n in ("ml", "web"))
    with replicas.client_for(replicas.replicas[0][1]) as admin_b:
        eventually(lambda: {t.name for t in admin_b.status().tenants if t.quota.cpu} >= {"ml", "web"})
    return ml, web


def test_a_tenant_reclaims_across_replicas_one_victim_and_its_late_result_refused(replicas: Cluster) -> None:
    from flux.client import FluxClient
    from flux.security import Credentials

    a, b = replicas.address, replicas.replicas[0][1]
    replicas.register(Path(__file__).with_name("stubborn_workflows.py"))
    replicas.start_worker("wa", "--cpus", "4", servers=[a])
    replicas.start_worker("wb", "--cpus", "4", servers=[b])
    ml, web = _two_teams(replicas)

    def held(tenant: str) -> int:
        return rows(
            replicas.db, f"SELECT count(*) FROM executions WHERE tenant = '{tenant}' AND state IN (2, 3)"
        )[0][0]

    with (
        FluxClient(a, timeout=10, credentials=Credentials(web, replicas.ca)) as web_a,
        FluxClient(b, timeout=10, credentials=Credentials(web, replicas.ca)) as web_b,
        FluxClient(b, timeout=10, credentials=Credentials(ml, replicas.ca)) as ml_b,
    ):
        # web borrows all of ml's 4 cores: 8 running, on both replicas' workers.
        theirs = [(web_a if i % 2 else web_b).run("stubborn_step", 120).execution_id for i in range(8)]
        eventually(lambda: held("web") == 8, what="web's eight")
        # ml submits one: every replica plans, one acts, one of web's is stopped. stubborn_step
        # finishes anyway and its worker reports a result, which is refused: back in line.
        mine = ml_b.run("slow_step", 120).execution_id
        eventually(lambda: held("ml") == 1, what="ml's run on the reclaimed core")
        assert held("web") == 7
        for _ in range(10):  # and no second victim, whichever replica's next step comes
            time.sleep(0.2)
            assert held("web") == 7
        [victim] = [i for i in theirs if web_a.get(i).state == control_pb2.EXECUTION_STATE_CREATED]
        assert web_a.get(victim).attempt == 1 and not web_a.get(victim).output_json
        preempted = []
        for address in (a, b):
            with replicas.client_for(address) as client:
                preempted.append(client.status().counters.preempted["reclaim"])
        assert sorted(preempted) == [0, 1]
        eventually(lambda: rows(replicas.db, "SELECT count(*) FROM preemptions")[0][0] == 0,
                   what="the preemption's row to go")  # fmt: skip
        for execution_id in [*theirs, mine]:
            with contextlib.suppress(FluxError):
                web_a.cancel(execution_id) if execution_id != mine else ml_b.cancel(execution_id)


def test_a_replica_killed_mid_preemption_loses_nothing(replicas: Cluster) -> None:
    from flux.client import FluxClient
    from flux.security import Credentials

    a, b = replicas.address, replicas.replicas[0][1]
    replicas.register(Path(__file__).with_name("stubborn_workflows.py"))
    # One worker, on the first replica (the second is where it goes when the first dies).
    replicas.start_worker("wa", "--cpus", "8", servers=[a, b])
    ml, web = _two_teams(replicas)
    with (
        FluxClient(b, timeout=10, credentials=Credentials(web, replicas.ca)) as web_b,
        FluxClient(b, timeout=10, credentials=Credentials(ml, replicas.ca)) as ml_b,
        replicas.client_for(a) as admin_a,
    ):
        theirs = [web_b.run("lingering_step", 120).execution_id for _ in range(8)]
        eventually(lambda: sum(web_b.get(i).state == control_pb2.EXECUTION_STATE_RUNNING for i in theirs) == 8,
                   what="web's eight on wa")  # fmt: skip
        mine = ml_b.run("slow_step", 120).execution_id
        # The first replica, whose worker runs web's work, preempts one; its victim lingers 4 s.
        eventually(lambda: admin_a.status().counters.preempted["reclaim"] == 1, what="the preemption")
        assert replicas.server is not None
        replicas.server.kill()
        replicas.server.wait(timeout=10)
        # The worker moves to the second replica; the victim finishes there (its result now
        # accepted: the stop died with the first replica), and ml's run takes the core it frees.
        eventually(lambda: ml_b.get(mine).state == control_pb2.EXECUTION_STATE_RUNNING, timeout=60,
                   what="ml's run after the failover")  # fmt: skip
        states = Counter(web_b.get(i).state for i in theirs)
        assert states[control_pb2.EXECUTION_STATE_RUNNING] == 7, states
        assert sum(states.values()) == 8  # every one of web's still known: none lost
    dispatches = rows(replicas.db, "SELECT execution_id, generation FROM dispatches")
    assert len(dispatches) == len(set(dispatches))


def test_a_token_revoked_through_one_replica_is_refused_by_the_other_within_a_second(
    replicas: Cluster,
) -> None:
    from flux.client import FluxClient
    from flux.errors import Unauthenticated
    from flux.security import Credentials

    a, b = replicas.address, replicas.replicas[0][1]
    with replicas.client_for(a) as admin_a, replicas.client_for(b) as admin_b:
        admin_a.tenants.create("ml")
        token = admin_a.tenants.create_token("ml", role="read", name="ci")
        with FluxClient(b, timeout=10, credentials=Credentials(token, replicas.ca)) as on_b:
            assert on_b.list_executions().executions == []  # remembered by replica b now
            admin_a.tenants.revoke_token(token.id)
            revoked_at = time.monotonic()

            def refused() -> bool:
                try:
                    on_b.list_executions()
                except Unauthenticated:
                    return True
                return False

            eventually(refused, timeout=5, interval=0.05, what="replica b to refuse the revoked token")
            assert time.monotonic() - revoked_at < 1.5
        # The audit trail is the database's: either replica lists what either recorded.
        actions = [(e.action, e.target) for e in admin_b.tenants.audit()]
        assert actions[:3] == [
            ("token.revoke", token.id),
            ("token.create", token.id),
            ("tenant.create", "ml"),
        ]
