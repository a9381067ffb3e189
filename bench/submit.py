"""Submission throughput: one by one and in bulk, on SQLite and on one PostgreSQL replica (issue 46).

``python -m bench submit`` (``SUBMIT_REPEATS`` repeats, default 3): each repeat starts a fresh server (gRPC workers,
the core alone, ``--no-http``) with 4 worker processes and measures, on a SQLite file and then on a
fresh database of a throwaway PostgreSQL (fsync on):

- ``one_by_one``: 2,000 ``RunWorkflow`` calls, 64 in flight, until all have completed;
- ``bulk``: 5,000 executions in ``RunWorkflows`` calls of 500 inputs, 2 calls in flight.

Each figure is executions completed per second (submit to the last completion, read from the
store), beside the server's CPU per execution. The stores alternate within each repeat, and the
box's speed (seconds for 10**7 Python additions) and its loopback round trip between two
processes are taken before every repeat: the figures move with them, and on a box shared with
other work a median over repeats says more than any one run.
Targets (issue 46): one by one >= 1,000/s on SQLite and >= 800/s on one PostgreSQL replica;
bulk >= 2,000/s on both.

``python -m bench.submit once sqlite|postgres``: one burst of each kind on that store, printed as
one JSON line: small enough to alternate two trees (A B A B ...) on a busy box.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.common import round_trip_us, speed_s, write
from bench.dispatch import BULK, BURST, WORKFLOWS, throughput
from flux.testing import Cluster

STORES = ("sqlite", "postgres")
WORKERS = ("w1", "w2", "w3", "w4")
TARGETS = {
    "sqlite": {"one_by_one": 1000, "bulk": 2000},
    "postgres": {"one_by_one": 800, "bulk": 2000},
}


def bursts(db: str, one_by_one: int = BURST, bulk: int = BULK) -> dict[str, object]:
    """Both bursts against one fresh server on ``db`` (a SQLite file name or a PostgreSQL URL)."""
    with tempfile.TemporaryDirectory(prefix="flux-bench-submit-") as tmp:
        cluster = Cluster(Path(tmp), "grpc", db=db)
        try:
            servers = [cluster.start_server("--no-http")]
            cluster.register(WORKFLOWS)
            for name in WORKERS:
                cluster.start_worker(name, "--capacity", "64")
            store = db if "://" in db else str(Path(tmp) / db)
            result: dict[str, object] = {"one_by_one": throughput(cluster, one_by_one, store, servers)}
            if bulk:
                result["bulk"] = throughput(cluster, bulk, store, servers, bulk=True)
            return result
        finally:
            cluster.close()


@contextlib.contextmanager
def _databases(stores: tuple[str, ...]) -> Iterator[dict[str, object]]:
    """A fresh database for each burst: a file name for SQLite, a new PostgreSQL database."""
    if "postgres" not in stores:
        yield {"sqlite": lambda: "flux.db"}
        return
    from flux.testing.postgres import TemporaryPostgres  # loads psycopg: only where it is used

    with TemporaryPostgres(durable=True) as postgres:
        yield {"sqlite": lambda: "flux.db", "postgres": postgres.database}


def _figures(measured: dict[str, object]) -> dict[str, float | None]:
    return {
        f"{kind}.{figure}": measured[kind][figure]  # type: ignore[index]
        for kind in ("one_by_one", "bulk")
        if kind in measured
        for figure in ("completed_per_second", "server_cpu_ms_per_execution")
    }


def main(
    repeats: int = int(os.environ.get("SUBMIT_REPEATS", "3")), stores: tuple[str, ...] = STORES
) -> dict[str, object]:
    runs: dict[str, list[dict[str, object]]] = {store: [] for store in stores}
    speeds, trips = [], []
    with _databases(stores) as databases:
        for _ in range(repeats):
            speeds.append(speed_s())
            trips.append(round_trip_us())
            for store in stores:
                runs[store].append(bursts(databases[store]()))  # type: ignore[operator]
    summary: dict[str, dict[str, object]] = {}
    for store, measured in runs.items():
        figures = [_figures(run) for run in measured]
        for name in figures[0]:
            values = sorted(v for f in figures if (v := f[name]) is not None)
            summary.setdefault(store, {})[name] = {
                "median": statistics.median(values),
                "min": values[0],
                "max": values[-1],
            }
    result = {
        "repeats": repeats,
        "one_by_one": {"executions": BURST, "in_flight": 64, "worker_processes": len(WORKERS)},
        "bulk": {"executions": BULK, "inputs_per_call": 500, "calls_in_flight": 2},
        "speed_s_10e7_additions": speeds,
        "round_trip_us": trips,
        "summary": summary,
        "targets_per_second": {s: TARGETS[s] for s in stores},
        "runs": runs,
    }
    write("submit", result)
    return result


def once(store: str) -> dict[str, object]:
    """One repeat on one store, its figures and the box's speed on one line."""
    speed, trip = speed_s(), round_trip_us()
    with _databases((store,)) as databases:
        measured = bursts(databases[store]())  # type: ignore[operator]
    return {"store": store, "speed_s": speed, "round_trip_us": trip, **_figures(measured)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["once"]:
        print(json.dumps(once(sys.argv[2] if len(sys.argv) > 2 else "sqlite")))
    else:
        main(*(int(a) for a in sys.argv[1:2]))
