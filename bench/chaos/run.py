"""One chaos run: a real cluster behind fault proxies, open-loop load, seeded faults, then the checks.

``run(seconds, seed, store, workdir)`` builds the cluster under ``workdir``
(SQLite: one server; PostgreSQL: a TemporaryPostgres of its own and three
replicas), puts a FaultProxy in front of every server port the workers use,
starts workers on both transports through them, and for ``seconds`` lets the
load and the fault scheduler run while the sampler watches. The load is
submitted as two tenants of one cohort, with quotas (``TENANTS``), so the
checks include "no tenant above its quota plus its borrowing limit". Then it undoes
every fault, lets the fleet drain with no manual step, reads the store, the
explanations and the servers' lifecycle logs back, and returns the result
document (``violations`` empty when every invariant held).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.chaos import dependency_invariants, faults, flow_invariants, invariants, schedule_invariants
from bench.chaos.faults import Scheduler, Step
from bench.chaos.invariants import (
    FINAL,
    NEVER_FITS,
    STATE_NAMES,
    AttemptSeen,
    Explained,
    Observations,
    Quotas,
    Record,
)
from bench.chaos.load import Load
from bench.chaos.proxy import FaultProxy
from bench.chaos.sampler import Sampler
from bench.common import percentiles
from flux.client import FluxClient
from flux.errors import FluxError
from flux.security import Credentials, Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

STORES = ("sqlite", "postgres")
ACK_DEADLINE_S = 3.0
SERVER_ARGS = (
    "--ack-deadline",
    f"{ACK_DEADLINE_S:g}",
    "--grace-period",
    "5",
    "--safety-tick",
    "1",
    "--log-format",
    "json",
)
REPLICAS = 3
CPUS, CAPACITY = 4, 4
WORKFLOWS = Path(__file__).with_name("workflows.py")
DRAIN_BOUND_S = 120.0
PROBE_TIMEOUT_S = 120.0
TRAIL_IDS = 20  # violating executions whose lifecycle lines go in the trail
# Two tenants share the load, in one cohort of 12 cores (the fleet has 16 to 24, so the probes,
# submitted as the unlimited default tenant, always find room): alpha may borrow 4 of beta's
# cores, beta all that alpha leaves. Borrowing and reclaim (preemption) happen.
TENANTS = {
    "alpha": {"cpu": 6, "cohort": "chaos", "borrowing_limit": {"cpu": 4}},
    "beta": {"cpu": 6, "cohort": "chaos"},
}
QUOTAS = Quotas(caps={"alpha": 10, "beta": 12}, cohorts={"chaos": (("alpha", "beta"), 12)})


class ChaosFleet:
    """The run's processes, as the fault scheduler acts on them (``faults.Targets``)."""

    def __init__(self, cluster: Cluster, postgres: object | None, workers: int):
        self.cluster = cluster
        self.postgres = postgres
        self.servers = 1 + len(cluster.replicas)
        self.proxies: dict[str, FaultProxy] = {}
        self._grpc: list[str] = []
        self._http: list[str] = []
        for index, (address, gateway) in enumerate(self.addresses()):
            grpc_proxy = FaultProxy(int(address.rsplit(":", 1)[1])).start()
            http_proxy = FaultProxy(int(gateway.rsplit(":", 1)[1])).start()
            self.proxies[f"grpc-{index}"], self.proxies[f"http-{index}"] = grpc_proxy, http_proxy
            self._grpc.append(grpc_proxy.address)
            self._http.append(http_proxy.url)
        # Alternate transports, gRPC first: both are always present from two workers on.
        self.workers = [f"chaos-{'grpc' if i % 2 == 0 else 'sse'}-{i + 1}" for i in range(workers)]
        self.processes: dict[str, subprocess.Popen[str]] = {}

    def addresses(self) -> list[tuple[str, str]]:
        """(gRPC address, gateway URL) of each server, the first one's first."""
        return [(self.cluster.address, self.cluster.gateway_url)] + [
            (a, g) for _, a, g in self.cluster.replicas
        ]

    def start_worker(self, name: str) -> None:
        # A different first server per worker spreads a replica fleet; the rest are fallbacks.
        index = self.workers.index(name)
        turn = index // 2 % self.servers
        place = {"servers": self._grpc[turn:] + self._grpc[:turn]} if "-grpc-" in name else {
            "gateways": self._http[turn:] + self._http[:turn]}  # fmt: skip
        self.processes[name] = self.cluster.start_worker(
            name, "--cpus", str(CPUS), "--capacity", str(CAPACITY), wait=False,
            env={"FLUX_SIMULATED_CPU_BUSY": "0"}, **place,
        )  # fmt: skip

    def kill_worker(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def stop_worker(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGSTOP)

    def continue_worker(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGCONT)

    def kill_server(self, index: int) -> None:
        process = self.cluster.server if index == 0 else self.cluster.replicas[index - 1][0]
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)

    def restart_server(self, index: int) -> None:
        if index == 0:
            self.cluster.restart_server(*SERVER_ARGS)
        else:
            self.cluster.restart_replica(index - 1, *SERVER_ARGS)

    def pause_store(self) -> None:
        assert self.postgres is not None
        self.postgres.pause()  # type: ignore[attr-defined]

    def resume_store(self) -> None:
        assert self.postgres is not None
        self.postgres.resume()  # type: ignore[attr-defined]

    def connected(self) -> set[str]:
        with contextlib.suppress(FluxError):
            return {w.name for w in self.cluster.client.workers().workers if w.connected}
        return set()

    def close(self) -> None:
        self.cluster.close()
        for proxy in self.proxies.values():
            proxy.close()


@contextlib.contextmanager
def _cluster(store: str, workdir: Path, workers: int) -> Iterator[ChaosFleet]:
    postgres = None
    stack = contextlib.ExitStack()
    with stack:
        if store == "postgres":
            from flux.testing.postgres import TemporaryPostgres

            postgres = stack.enter_context(TemporaryPostgres())
            cluster = Cluster(workdir, db=postgres.database())
        else:
            cluster = Cluster(workdir)
        try:
            cluster.start_server(*SERVER_ARGS)
            if store == "postgres":
                for _ in range(REPLICAS - 1):
                    cluster.start_replica(*SERVER_ARGS)
            cluster.register(WORKFLOWS)
            fleet = ChaosFleet(cluster, postgres, workers)
        except BaseException:
            cluster.close()
            raise
        try:
            yield fleet
        finally:
            fleet.close()


def run(seconds: float, seed: int, store: str, workdir: Path, workers: int = 6, rate: float = 8.0) -> dict:
    """Run chaos for ``seconds`` on ``store`` ("sqlite" or "postgres"); returns the result document."""
    if store not in STORES:
        raise ValueError(f"store must be one of {', '.join(STORES)}; got {store!r}")
    if not 4 <= workers <= 6:
        raise ValueError(f"workers must be from 4 to 6 (both transports, two kept healthy); got {workers}")
    workdir.mkdir(parents=True, exist_ok=True)
    markers = workdir / "running"
    with _cluster(store, workdir, workers) as fleet:
        return _run(fleet, seconds, seed, store, markers, rate)


def _clients(fleet: ChaosFleet, timeout: float) -> list[FluxClient]:
    credentials = fleet.cluster.credentials(Role.CLIENT)
    return [FluxClient(address, timeout=timeout, credentials=credentials) for address, _ in fleet.addresses()]


def _tenants(fleet: ChaosFleet, timeout: float) -> dict[str, list[FluxClient]]:
    """Create ``TENANTS`` and a token of each; every server knows their terms before this returns."""
    admin = fleet.cluster.client
    clients = {}
    for name, terms in TENANTS.items():
        admin.tenants.create(name, **terms)
        credentials = Credentials(admin.tenants.create_token(name), fleet.cluster.ca)
        clients[name] = [
            FluxClient(address, timeout=timeout, credentials=credentials) for address, _ in fleet.addresses()
        ]
    for address in [fleet.cluster.address, *(r[1] for r in fleet.cluster.replicas)]:
        with fleet.cluster.client_for(address) as server:
            eventually(
                lambda server=server: (
                    {t.name for t in server.status().tenants if t.quota.cpu} >= set(TENANTS)
                ),
                timeout=30,
                what=f"{address} to apply the tenants' quotas",
            )
    return clients


def _tenant_cores(fleet: ChaosFleet, admin: FluxClient, store: str) -> tuple[str, dict[str, int]]:
    """The cores each tenant holds now: the server's reservations (one server), or the database's
    SCHEDULED and RUNNING rows (replicas: each server's own view is partly remote)."""
    if store != "postgres":
        return "server", {t.name: t.usage.cpu for t in admin.status().tenants}
    import psycopg

    held: Counter[str] = Counter()
    with psycopg.connect(fleet.cluster.db, connect_timeout=2, options="-c statement_timeout=2000") as db:
        for tenant, requests, count in db.execute(
            "SELECT e.tenant, w.requests, count(*) FROM executions e JOIN workflows w "
            "ON w.name = e.workflow_name AND w.version = e.workflow_version "
            "WHERE e.state IN (%s, %s) GROUP BY 1, 2",
            (invariants.SCHEDULED, invariants.RUNNING),
        ).fetchall():
            held[tenant] += json.loads(requests).get("cpu", 0) * count
    return "database", dict(held)


def _key_holds(fleet: ChaosFleet) -> tuple[str, dict[tuple[str, str], int]]:
    """The keyed workflow's SCHEDULED and RUNNING rows now, per (tenant, key), as the store has them."""
    sql = (
        "SELECT tenant, flow_keys, count(*) FROM executions WHERE state IN (?, ?) AND workflow_name = ? "
        "GROUP BY 1, 2"
    )
    rows = _store_rows(fleet, sql, (invariants.SCHEDULED, invariants.RUNNING, flow_invariants.KEYED))
    held = {(tenant, json.loads(keys).get("concurrency", "")): int(n) for tenant, keys, n in rows}
    return "store", held


def _batch_holds(fleet: ChaosFleet) -> tuple[str, dict[tuple[str, str], int]]:
    """Each batch's SCHEDULED and RUNNING members now, per (tenant, batch id), as the store has them."""
    sql = (
        "SELECT tenant, batch_id, count(*) FROM executions WHERE state IN (?, ?) AND batch_id <> '' "
        "GROUP BY 1, 2"
    )
    rows = _store_rows(fleet, sql, (invariants.SCHEDULED, invariants.RUNNING))
    return "store", {(tenant, batch_id): int(n) for tenant, batch_id, n in rows}


def _store_rows(fleet: ChaosFleet, sql: str, params: tuple[object, ...]) -> list[tuple]:  # type: ignore[type-arg]
    if "://" in fleet.cluster.db:
        import psycopg

        with psycopg.connect(fleet.cluster.db, connect_timeout=2, options="-c statement_timeout=2000") as db:
            return db.execute(sql.replace("?", "%s"), params).fetchall()
    import sqlite3

    with contextlib.closing(sqlite3.connect(fleet.cluster.workdir / fleet.cluster.db, timeout=2)) as db:
        return db.execute(sql, params).fetchall()


def _run(fleet: ChaosFleet, seconds: float, seed: int, store: str, markers: Path, rate: float) -> dict:
    cluster = fleet.cluster
    for name in fleet.workers:
        fleet.start_worker(name)
    phases: dict[str, float] = {}
    mark = time.monotonic()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name], mark = now - mark, now

    eventually(
        lambda: set(fleet.workers) <= fleet.connected(), timeout=60, what="every chaos worker to connect"
    )
    phase("workers_connect")
    clients, quick = _clients(fleet, 10), _clients(fleet, 2)
    tenants = _tenants(fleet, 10)
    # One schedule ticks through the faults (bench/chaos/schedule_invariants.py).
    cluster.client.schedules.create(
        schedule_invariants.SCHEDULE, workflow="chaos_echo", input={"markers": str(markers)},
        **schedule_invariants.TERMS,
    )  # fmt: skip
    phase("tenants")
    began = time.monotonic()
    load = Load(seed + 1, clients, str(markers), rate, tenants=tenants)
    sampler = Sampler(
        quick, markers, CPUS, CAPACITY, began,
        tenants=lambda: _tenant_cores(fleet, quick[0], store), keys=lambda: _key_holds(fleet),
        batches=lambda: _batch_holds(fleet),
    )  # fmt: skip
    recovery: dict[str, list[float]] = {}
    unrecovered: Counter[str] = Counter()
    probes = ThreadPoolExecutor(max_workers=8, thread_name_prefix="chaos-probe")

    def probe(step: Step) -> None:
        execution_id = load.submit(
            "chaos_echo", {"markers": str(markers)}, "probe", give_up_s=PROBE_TIMEOUT_S
        )
        final = None if execution_id is None else _wait_any(clients, execution_id, PROBE_TIMEOUT_S)
        if final is not None and final.state == control_pb2.EXECUTION_STATE_COMPLETED:
            recovery.setdefault(step.kind, []).append(time.monotonic() - began - step.at)
        else:
            unrecovered[step.kind] += 1

    kinds = faults.POSTGRES_KINDS if store == "postgres" else faults.SQLITE_KINDS
    scheduler = Scheduler(seed, fleet, kinds, on_fault=lambda step: probes.submit(probe, step))
    scheduler.began = began
    thread = threading.Thread(target=scheduler.run, args=(seconds,), name="chaos-faults", daemon=True)
    sampler.start()
    load.start()
    thread.start()
    thread.join(seconds + 120)
    scheduler.stop()
    thread.join(60)
    phase("faults")
    # Faults stop: everything comes back, then the fleet drains on its own.
    scheduler.finish()
    phase("undo")
    schedule_runs = _schedule_runs(cluster)
    phase("schedule")
    load.stop()
    phase("load_stop")
    drain_started = time.monotonic()
    remaining = _drain(cluster, load.accepted, DRAIN_BOUND_S)
    drain_s = time.monotonic() - drain_started
    phase("drain")
    probes.shutdown(wait=True)
    sampler.stop()
    phase("probes")

    records = _records(cluster)
    explained = _explain(clients[0], load.accepted, records)
    logs = _server_logs(cluster.workdir)
    log_lines = [line for lines in logs.values() for line in lines]
    # Each event names the log it came from: on replicas, which server said it.
    lifecycle = [
        {**event, "log": name} for name, lines in logs.items() for event in invariants.parse_lifecycle(lines)
    ]
    observed = Observations(
        accepted=dict(load.accepted), records=records, explained=explained, lifecycle=lifecycle,
        samples=sampler.kept, cancelled=set(load.cancelled), undrained=remaining, drain_bound_s=DRAIN_BOUND_S,
        tenant_samples=sampler.tenant_samples, quotas=QUOTAS,
        must_time_out={i for i, shape in load.accepted.items() if shape == invariants.TIMES_OUT},
    )  # fmt: skip
    found = invariants.check(observed)
    paced = {i: records[i] for i, shape in load.accepted.items() if shape == "paced" and i in records}
    found["flow"] = flow_invariants.over_key_max(sampler.key_samples) + flow_invariants.over_rate(
        flow_invariants.starts(paced, load.owner), flow_invariants.RateTerms(lag_s=ACK_DEADLINE_S)
    )
    found["dependencies"] = dependency_invariants.check(load.after, records)
    found["flow"] += flow_invariants.over_batch_max(sampler.batch_samples)
    found["schedule"] = schedule_invariants.check(*schedule_runs)
    violations = [v for kind in found.values() for v in kind]
    violations += [invariants.Violation("harness", "faults", error) for error in scheduler.errors]
    # A refusal that is neither an acceptance nor UNAVAILABLE (a store error leaking as INTERNAL,
    # an id the server no longer knows) is a finding too.
    violations += [invariants.Violation("client_error", "load", error) for error in load.errors]
    phase("checks")
    states = Counter(
        STATE_NAMES.get(r.state, str(r.state)) for i, r in records.items() if i in load.accepted
    )  # fmt: skip
    document: dict[str, object] = {
        "seed": seed,
        "seconds": seconds,
        "store": store,
        "workers": {
            "count": len(fleet.workers),
            "cpus": CPUS,
            "capacity": CAPACITY,
            "transports": sorted({n.split("-")[1] for n in fleet.workers}),
        },  # fmt: skip
        "faults": scheduler.counts(),
        "executions": {
            "accepted": len(load.accepted),
            "by_shape": dict(Counter(load.accepted.values())),
            "by_final_state": dict(states),
            "cancel_answered_cancelled": len(load.cancelled),
        },
        "load": {"rate_per_s": rate, **dict(load.stats)},
        "lost": len(found["lost"]),
        "duplicates": len(found["duplicates"]),
        "overcommit": len(found["overcommit"]),
        "cancelled_completed": len(found["cancelled_completed"]),
        "quota": len(found["quota"]),
        "dependencies": {"dependents": len(load.after), "violations": len(found["dependencies"])},
        "flow": {
            "violations": len(found["flow"]),
            "key_samples": len(sampler.key_samples),
            "key_peak": sampler.key_peak,
            "batch_samples": len(sampler.batch_samples),
            "batch_peak": sampler.batch_peak,
            "paced_starts": sum(len(t) for t in flow_invariants.starts(paced, load.owner).values()),
        },
        "schedule": {
            "violations": len(found["schedule"]),
            "ticks": len(schedule_runs[0]),
            "stored": len(schedule_runs[1]),
        },
        "tenants": {
            "terms": TENANTS,
            "samples": len(sampler.tenant_samples),
            "peak_cores": sampler.tenant_peak,
            "accepted": dict(Counter(load.owner.values())),
            # Executions requeued by preemption, as the servers logged them.
            "preempted": sum(
                e.get("event") == "requeued" and e.get("reason") == "preempted" for e in lifecycle
            ),
        },
        "drain_s": round(drain_s, 2),
        "drained": not found["drain"],
        "samples": sampler.taken,
        "sample_peaks": sampler.peak,
        "phases_s": {name: round(value, 2) for name, value in phases.items()},
        "lifecycle_lines": len(lifecycle),
        "server_errors": _errors(log_lines),
        "recovery_s": {
            kind: percentiles(samples, unit_scale=1.0) for kind, samples in sorted(recovery.items())
        },
        "unrecovered_probes": dict(unrecovered),
        "violations": [v.to_json() for v in violations],
        # Every fault and undo step, so each recovery figure can be read against what happened.
        "fault_trail": [step.to_json() for step in scheduler.trail],
    }
    if violations:
        ids = list(dict.fromkeys(v.subject for v in violations if v.subject in load.accepted))[:TRAIL_IDS]
        document["trail"] = {
            "seed": seed,
            "faults": [step.to_json() for step in scheduler.trail],
            "lifecycle": {i: [e for e in lifecycle if e.get("execution_id") == i] for i in ids},
            "workdir": str(cluster.workdir),
        }
    for client in clients + quick + [c for group in tenants.values() for c in group]:
        client.close()
    return document


def _wait_any(clients: list[FluxClient], execution_id: str, timeout: float) -> control_pb2.Execution | None:
    """Its final state through whichever server answers (one may be down just now), or None at ``timeout``."""
    deadline = time.monotonic() + timeout
    for turn in itertools.count():
        if time.monotonic() >= deadline:
            return None
        with contextlib.suppress(FluxError):  # down, or not final yet: follow it on the next server
            return clients[turn % len(clients)].wait(execution_id, timeout=2.0)
    return None


def _drain(cluster: Cluster, accepted: dict[str, str], bound_s: float) -> list[str]:
    """Wait up to ``bound_s`` for every accepted id but the never-fits ones to be final; return the rest."""
    owed = {i for i, shape in accepted.items() if shape != NEVER_FITS}
    deadline = time.monotonic() + bound_s
    while True:
        with contextlib.suppress(Exception):  # the store may be busy a moment: read it again
            final = {row[0] for row in cluster.query("SELECT execution_id, state FROM executions")
                     if row[1] in FINAL}  # fmt: skip
            remaining = sorted(owed - final)
            if not remaining or time.monotonic() > deadline:
                return remaining
        if time.monotonic() > deadline:
            return sorted(owed)
        time.sleep(1.0)


def _schedule_runs(cluster: Cluster) -> tuple[list[tuple[float, str, str]], list[str]]:
    """Pause the chaos schedule, let the replicas hear of it and a dead claimer's runs be
    submitted again (flux/dispatcher/transitions/ticker.py: REPAIR_AFTER), then read its runs
    and their executions."""
    name = schedule_invariants.SCHEDULE

    def pause() -> bool:
        # A fresh channel each try: one that met the server down may still be backing off.
        with contextlib.suppress(FluxError), cluster.client_for(cluster.address) as client:
            client.schedules.pause(name)
            return True
        return False

    eventually(pause, timeout=60, interval=1, what="the chaos schedule paused")
    time.sleep(3)  # every replica reads the schedules again within 2 s

    def read() -> tuple[list[tuple[float, str, str]], list[str]]:
        runs = [
            (float(t), e, r)
            for t, e, r in cluster.query(
                "SELECT tick, execution_id, result FROM schedule_runs WHERE schedule = ?", name
            )
        ]
        stored = [
            row[0]
            for row in cluster.query(
                "SELECT execution_id FROM executions WHERE execution_id LIKE ?", f"sch-{name}-%"
            )
        ]
        return runs, stored

    with contextlib.suppress(AssertionError):
        eventually(
            lambda: (lambda r: {e for _, e, x in r[0] if x == "fired"} <= set(r[1]))(read()),
            timeout=45,
            what="runs stored",
        )
    return read()


def _records(cluster: Cluster) -> dict[str, Record]:
    rows = cluster.query(
        "SELECT execution_id, state, worker, attempt, output_json, max_attempts, reason, attempts, updated_at "
        "FROM executions"
    )
    return {
        row[0]: Record(
            row[0],
            int(row[1]),
            row[2],
            int(row[3]),
            row[4] or "",
            int(row[5] or 0),
            row[6] or "",
            tuple(AttemptSeen(*item[:5]) for item in json.loads(row[7] or "[]")),
            float(row[8] or 0),
        )  # fmt: skip
        for row in rows
    }


def _explain(
    client: FluxClient, accepted: dict[str, str], records: dict[str, Record]
) -> dict[str, Explained]:
    explained = {}
    for execution_id in accepted:
        record = records.get(execution_id)
        if record is not None and record.state == invariants.CREATED:
            with contextlib.suppress(FluxError):
                answer = client.explain(execution_id)
                explained[execution_id] = Explained(answer.infeasible, answer.summary)
    return explained


def _server_logs(workdir: Path) -> dict[str, list[str]]:
    """The lines of each server's log (server.log, replica-N.log; restarts append to the same file)."""
    paths = sorted([*workdir.glob("server.log"), *workdir.glob("replica-*.log")])
    return {path.name: path.read_text(errors="replace").splitlines() for path in paths}


def _errors(lines: list[str]) -> dict[str, int]:
    """The servers' ERROR lines, counted by the start of their message (ids cut off): what to look at."""
    counted: Counter[str] = Counter()
    for line in lines:
        if '"level": "ERROR"' not in line:
            continue
        with contextlib.suppress(ValueError):
            message = str(json.loads(line).get("msg", ""))
            counted[re.sub(r"[0-9a-f]{32}", "<id>", message)[:80]] += 1
    return dict(counted.most_common(20))
