"""``python -m bench graphs``: work that waits on other work (issue 44).

The result is one JSON document (bench/results/graphs.json) with one key per section; each
section is a function in ``SECTIONS`` returning a dict, so dependencies, arrays and schedules
add their rows side by side. ``BENCH_GRAPHS_SECTIONS=a,b`` runs only those.

Dependencies (flux/dispatcher/transitions/dependencies.py):

- ``dependent_latency``: ``BENCH_GRAPHS_PAIRS`` (200) pairs, one after the other, on real
  processes (one server, one worker of capacity 4 over gRPC, idle between pairs): ``a`` (its body
  runs ``HOLD``, 50 ms, so ``b`` is stored waiting), then ``b`` after ``a``; a pair whose ``b`` was
  ready at its submission is counted apart, not timed. Measured: ``b``'s body start (the worker starts a body with its dispatch)
  minus ``a``'s final state as the server decided it (its stored ``updated_at``, taken just
  before its commit). So each sample is the commit, the release, the placement, the push to the
  worker and the body's start: an upper bound of "dispatched after the result is committed"
  (target p99 <= 5 ms). On SQLite, and on PostgreSQL (fsync on), one server.
- ``dependent_latency_in_process``: the dispatcher alone over a real store and a fake worker
  session: from the Complete of ``a`` (its commit included) to ``b``'s dispatch pushed to the
  session, and from ``a``'s commit answered (its final row's write resolved on the loop) to that
  push: "dispatched after the result is committed" itself. On SQLite, and on PostgreSQL (fsync
  on) as one replica, where ``b``'s claim is a transaction of its own unless it rides in ``a``'s.
- ``dag_accept``: a random DAG of ``BENCH_GRAPHS_DAG`` (10,000) items, each with 0 to 4 parents
  among the items before it, built with ``client.graph()`` and submitted in one RunWorkflows call
  to a real SQLite server: the call's wall time, client encoding included (target <= 1 s), and
  the server process's CPU time for it (what the call costs, apart from the box's load).
- ``placement_vs_waiting``: in process, 2,000 ready executions submitted in one call and placed
  on a worker with room for all of them, timed to the last dispatch, with 0 and then
  ``BENCH_GRAPHS_WAITING`` (100,000) executions waiting on dependencies (held out of the queue,
  so the matcher never scans them): the two times should match.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from bench.common import percentiles, write
from flux.testing import Cluster

HERE = Path(__file__).parent
WORKFLOWS = HERE / "graphs_workflows.py"
PAIRS = int(os.environ.get("BENCH_GRAPHS_PAIRS", "200"))
DAG = int(os.environ.get("BENCH_GRAPHS_DAG", "10000"))
WAITING = int(os.environ.get("BENCH_GRAPHS_WAITING", "100000"))
HOLD = 0.05  # seconds the dependency runs in ``dependent_latency``


# ---------------------------------------------------------------------------- dependencies


def _latency_on(db: str | None) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), db=db or "flux.db")
        try:
            cluster.start_server()
            cluster.register(WORKFLOWS)
            cluster.start_worker("w1", "--capacity", "4")
            client = cluster.client
            samples, ready_at_submission = [], 0
            for _ in range(PAIRS):
                # ``a`` runs HOLD seconds, so ``b`` is stored waiting and released by ``a``'s end:
                # a quick ``a`` often ended before ``b`` was submitted, and such a pair timed
                # ``b``'s submission (its commit, its answer), not a release.
                a = client.run("graph_step", {"sleep": HOLD})
                b = client.run("graph_step", None, after=[a])
                if not b.dependencies_waiting:
                    ready_at_submission += 1
                    client.wait(b.execution_id, 60)
                    continue
                final = client.wait(b.execution_id, 60)
                started = json.loads(final.output_json)["started"]
                ended = client.get(a.execution_id).updated_at_ms / 1000
                samples.append(started - ended)
            # updated_at is stored to the millisecond: a sample is within 1 ms of the truth.
            return {"pairs": PAIRS, "ready_at_submission": ready_at_submission, "hold_s": HOLD,
                    "a_final_to_b_body_start_ms": percentiles(samples)}  # fmt: skip
        finally:
            cluster.close()


def dependent_latency() -> dict[str, object]:
    from flux.testing.postgres import TemporaryPostgres

    result = {"sqlite": _latency_on(None)}
    with TemporaryPostgres(durable=True) as postgres:
        result["postgres"] = _latency_on(postgres.database())
    return result


async def _dispatcher(path: Path | str, capacity: int, commits: dict[str, float] | None = None):  # noqa: ANN202
    """A dispatcher on SQLite at ``path``, or one replica on PostgreSQL at the URL ``path``;
    ``commits``: each execution's last committed write, when its answer reached the loop."""
    from flux.dispatcher.core import Dispatcher, Settings, WorkerRegistration
    from flux.domain.resource_request import ResourceRequest
    from flux.domain.worker import WorkerResources, WorkerSoftware
    from flux.domain.workflow import WorkflowRecord
    from flux.store import PostgresStore, SqliteStore

    settings = Settings(server_id="bench", max_pending=10_000_000, max_pending_bytes=1 << 40)
    if isinstance(path, str):
        from flux.dispatcher.modes.shared.replica import shared

        store = PostgresStore(path, "bench")
        d = Dispatcher(_timed(store, commits), settings, modes=shared(store))
    else:
        d = Dispatcher(_timed(SqliteStore(path), commits), settings)
    await d.start()
    for name, cpu in (("step", 0), ("blocked", 1024)):
        declared = WorkflowRecord(name, 0, "", "main", ResourceRequest(cpu=cpu), {}, 1)
        await d.register_workflows(f"{name}.py", f"# {name}\n", [declared])
    gib = 1024**3
    resources = WorkerResources(cpu_total=4, cpu_available=4, memory_total=16 * gib,
                                memory_available=16 * gib, disk_total=100 * gib, disk_free=100 * gib)  # fmt: skip
    registration = WorkerRegistration("w1", resources, WorkerSoftware(), {}, capacity)
    token = await d.register_worker(registration)
    return d, d.connect("w1", token), token


def _timed(store, commits: dict[str, float] | None):  # noqa: ANN001, ANN202 - bench plumbing
    """``store``, its ``save`` noting when each write's answer (its commit) reaches the loop."""
    if commits is None:
        return store
    save = store.save

    def timed(execution):  # noqa: ANN001, ANN202
        written = save(execution)
        written.add_done_callback(lambda _: commits.__setitem__(execution.execution_id, time.perf_counter()))
        return written

    store.save = timed
    return store


async def _in_process_latency(path: Path | str) -> dict[str, object]:
    from flux.dispatcher.state.session import Scheduled
    from flux.dispatcher.transitions.submission import Overrides

    commits: dict[str, float] = {}
    d, session, token = await _dispatcher(path, capacity=4, commits=commits)
    pushed: dict[str, float] = {}
    arrived = asyncio.Event()

    def wake() -> None:
        for event in session.take(1024):
            if isinstance(event, Scheduled):
                pushed[event.execution.execution_id] = time.perf_counter()
                arrived.set()

    session.attach(wake)
    samples, after_commit = [], []
    try:
        for _ in range(PAIRS):
            a = await d.submit("step", "null")
            b = await d.submit("step", "null", overrides=Overrides(after=(a.execution_id,)))
            while a.execution_id not in pushed:  # a replica may bind it after the submission's answer
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), 10)
            held = d.table.get(a.execution_id)
            d.claim("w1", token, a.execution_id, held.generation)
            await asyncio.sleep(0.002)  # the claim's write (RUNNING) landed: a's final row is the next
            started = time.perf_counter()
            await d.complete("w1", token, a.execution_id, held.generation, "1", None)
            while b.execution_id not in pushed:  # waited on, not polled: a busy loop starves PostgreSQL
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), 10)
            samples.append(pushed[b.execution_id] - started)
            after_commit.append(pushed[b.execution_id] - commits[a.execution_id])
            current = d.table.get(b.execution_id)
            d.claim("w1", token, b.execution_id, current.generation)
            await d.complete("w1", token, b.execution_id, current.generation, "1", None)
    finally:
        await d.stop()
    return {
        "pairs": PAIRS,
        "complete_call_to_dependent_pushed_ms": percentiles(samples),
        "commit_answered_to_dependent_pushed_ms": percentiles(after_commit),
    }


def dependent_latency_in_process() -> dict[str, object]:
    from flux.testing.postgres import TemporaryPostgres

    with tempfile.TemporaryDirectory() as tmp:
        result = {"sqlite": asyncio.run(_in_process_latency(Path(tmp) / "flux.db"))}
    with TemporaryPostgres(durable=True) as postgres:
        result["postgres"] = asyncio.run(_in_process_latency(postgres.database()))
    return result


def dag_accept() -> dict[str, object]:
    rng = random.Random(44)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            cluster.start_server("--max-pending", "1000000")
            cluster.register(WORKFLOWS)
            client = cluster.client
            runs, cpu = [], []
            for _ in range(3):
                g = client.graph()
                nodes = []
                for i in range(DAG):
                    parents = rng.sample(nodes, min(len(nodes), rng.randint(0, 4))) if nodes else []
                    nodes.append(g.add("graph_step", i, after=parents))
                edges = sum(len(item.after_index) for item in g._request.items)
                server = psutil.Process(cluster.server.pid)
                cpu_before, started = sum(server.cpu_times()[:2]), time.perf_counter()
                accepted = g.submit()
                runs.append(time.perf_counter() - started)
                cpu.append(sum(server.cpu_times()[:2]) - cpu_before)
                assert len(accepted) == DAG
            stored = cluster.query("SELECT count(*), sum(waiting > 0) FROM executions")[0]
            return {
                "items": DAG,
                "edges": edges,
                "accept_s": [round(r, 3) for r in runs],
                "best_s": round(min(runs), 3),
                # The server's CPU time for the call: what it costs, apart from how busy the box is.
                "server_cpu_s": [round(c, 3) for c in cpu],
                "stored_rows": stored[0],
                "stored_waiting": stored[1],
            }
        finally:
            cluster.close()


async def _placement(path: Path, waiting: int) -> float:
    from flux.dispatcher.state.session import Scheduled
    from flux.dispatcher.transitions.graphs import GraphItem

    d, session, _ = await _dispatcher(path, capacity=4096)
    placed = 0

    def wake() -> None:  # read as pushed: the session's buffer is bounded
        nonlocal placed
        placed += sum(isinstance(e, Scheduled) for e in session.take(4096))

    session.attach(wake)
    try:
        blocker = await d.submit("blocked", "null")  # no worker can ever run it: its dependents wait
        for start in range(0, waiting, 10_000):
            count = min(10_000, waiting - start)
            await d.submit_graph([GraphItem("step", after=(blocker.execution_id,))] * count)
        assert len(d.dependencies) == waiting
        started = time.perf_counter()
        await d.submit_many("step", ["null"] * 2_000)
        while placed < 2_000:
            await asyncio.sleep(0)
        return time.perf_counter() - started
    finally:
        await d.stop()


def placement_vs_waiting() -> dict[str, object]:
    result: dict[str, object] = {}
    for waiting in (0, WAITING):
        times = []
        for run in range(3):
            with tempfile.TemporaryDirectory() as tmp:
                times.append(asyncio.run(_placement(Path(tmp) / f"flux{run}.db", waiting)))
        result[f"waiting_{waiting}"] = {"place_2000_ms": [round(t * 1000, 1) for t in times],
                                        "best_ms": round(min(times) * 1000, 1)}  # fmt: skip
    return result


# Each section's rows, in order. Arrays and schedules add theirs here.
SECTIONS: dict[str, Callable[[], dict[str, object]]] = {
    "dependent_latency": dependent_latency,
    "dependent_latency_in_process": dependent_latency_in_process,
    "dag_accept": dag_accept,
    "placement_vs_waiting": placement_vs_waiting,
}


def main() -> dict[str, object]:
    chosen = [s for s in os.environ.get("BENCH_GRAPHS_SECTIONS", "").split(",") if s] or list(SECTIONS)
    result = {name: SECTIONS[name]() for name in chosen}
    write("graphs", result)
    return result


if __name__ == "__main__":
    main()
