"""``python -m bench schedules``: ``BENCH_SCHEDULES`` (1,000) schedules ticking every second.

Each schedule runs ``echo`` every second (``--overlap allow``: every tick is a run) for
``BENCH_SCHEDULES_SECONDS`` (20) seconds, on a real server and then on two PostgreSQL replicas
whose tickers race for every tick. No worker runs them: what is measured is the ticker, from the
tick to its run stored, not the dispatch. Reported, from the store:

- ``fire_lateness_ms``: each run's ``created_at`` (the server's clock as it built the execution)
  minus its tick, p50/p99/max (target: every tick within 1 s);
- ``claim_lateness_ms``: the tick's claim in ``schedule_runs`` minus the tick;
- ``expected_ticks`` / ``fired``: every whole second of the window, for every schedule, once;
  ``missing``: expected ticks with no run; ``doubled``: ticks with two runs or two executions
  (the primary keys make both impossible; counted anyway).

The first and last two seconds are left out of the window (schedules are created, and the
server stopped, around them).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.common import percentiles, write
from flux.testing import Cluster

COUNT = int(os.environ.get("BENCH_SCHEDULES", "1000"))
SECONDS = float(os.environ.get("BENCH_SCHEDULES_SECONDS", "20"))
WORKFLOWS = Path(__file__).parents[1] / "tests" / "integration" / "workflows.py"
RUNS = (
    "SELECT r.schedule, r.tick, r.at, e.created_at FROM schedule_runs r "
    "LEFT JOIN executions e ON e.execution_id = r.execution_id WHERE r.result = 'fired'"
)


def _measure(cluster: Cluster) -> dict[str, object]:
    schedules = [
        {"name": f"s{i:04d}", "workflow": "echo", "every": "1s", "overlap": "allow", "input": i}
        for i in range(COUNT)
    ]
    started = time.monotonic()
    cluster.client.schedules.apply(schedules)
    applied = time.monotonic() - started
    begin = time.time()
    time.sleep(SECONDS)
    end = time.time()
    first, last = int(begin) + 2, int(end) - 2
    rows = [r for r in cluster.query(RUNS) if first <= float(r[1]) <= last]
    claims = [float(at) - float(tick) for _, tick, at, _ in rows]
    stored = [float(created) - float(tick) for _, tick, _, created in rows if created is not None]
    expected = COUNT * (last - first + 1)
    seen = {(name, float(tick)) for name, tick, _, _ in rows}
    executions = cluster.query(
        "SELECT count(*), count(DISTINCT execution_id) FROM executions WHERE execution_id LIKE ?", "sch-s%"
    )[0]
    return {
        "schedules": COUNT,
        "apply_s": round(applied, 3),
        "window_s": last - first + 1,
        "expected_ticks": expected,
        "fired": len(rows),
        "missing": expected - len(seen),
        "doubled": (len(rows) - len(seen)) + (int(executions[0]) - int(executions[1])),
        "not_stored": len(rows) - len(stored),
        "within_1s": sum(1 for s in stored if s <= 1.0),
        "fire_lateness_ms": percentiles(stored),
        "claim_lateness_ms": percentiles(claims),
    }


def _sqlite() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), "grpc")
        try:
            cluster.start_server("--no-http")
            cluster.register(WORKFLOWS)
            return _measure(cluster)
        finally:
            cluster.close()


def _postgres() -> dict[str, object]:
    from flux.testing.postgres import TemporaryPostgres

    with TemporaryPostgres() as postgres, tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp), "grpc", db=postgres.database())
        try:
            cluster.start_server("--no-http")
            cluster.start_replica("--no-http")
            cluster.register(WORKFLOWS)
            return _measure(cluster)
        finally:
            cluster.close()


def main() -> None:
    result: dict[str, object] = {"target": "every tick fired within 1 s, none twice", "sqlite": _sqlite()}
    try:
        result["postgres_2_replicas"] = _postgres()
    except Exception as exc:  # no PostgreSQL binaries on this machine
        result["postgres_2_replicas"] = {"skipped": str(exc)}
    write("schedules", result)


if __name__ == "__main__":
    main()
