"""``python -m bench rate-live``: a rate limit's accuracy in real servers (issue 43's target: the
executions started per 60 s window within 1 % of the limit, on one server and on three
PostgreSQL replicas).

``paced_600`` (bench/rate_live_workflows.py: ``RateLimit("600/m")``, burst 1) with a backlog that
never runs dry: ``BENCH_RATE_LIVE_WINDOWS`` (2) windows' worth of runs plus a margin, submitted at
once. Each body returns when it started (its worker's clock; every process here shares one). The
starts are cut into windows of ``BENCH_RATE_LIVE_WINDOW`` seconds (60) from the first one; each
window's count is compared with the rate's (600). Also reported: the most and the fewest starts in
any window of that length sliding over the run (the rate must hold over *any* window, not only
the aligned ones), and the largest gap between two starts.

- ``sqlite``: one server, four workers.
- ``postgres_3_replicas``: three replicas on a throwaway PostgreSQL, the runs submitted to the
  three in turn, four workers homed on them in turn: the bucket is shared through the database
  (flow_buckets), so the three together start no more than one rate.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.common import write
from flux.testing import Cluster, eventually

WINDOW = float(os.environ.get("BENCH_RATE_LIVE_WINDOW", "60"))
WINDOWS = int(os.environ.get("BENCH_RATE_LIVE_WINDOWS", "2"))
RATE_PER_MIN = 600
WORKFLOWS = Path(__file__).with_name("rate_live_workflows.py")
WORKERS = 4


def _expected() -> float:
    return RATE_PER_MIN / 60.0 * WINDOW


def _figures(starts: list[float]) -> dict[str, object]:
    starts = sorted(starts)
    first = starts[0]
    aligned = [
        sum(1 for s in starts if first + w * WINDOW <= s < first + (w + 1) * WINDOW) for w in range(WINDOWS)
    ]
    # Sliding windows whose both ends lie inside the run: one starting at each start.
    inside = [s for s in starts if s + WINDOW <= starts[-1]]
    counts = [sum(1 for t in starts if s <= t < s + WINDOW) for s in inside]
    expected = _expected()
    worst = max(abs(c - expected) / expected for c in aligned)
    return {
        "starts_per_window": aligned,
        "expected_per_window": expected,
        "worst_error": round(worst, 5),
        "sliding_most": max(counts) if counts else None,
        "sliding_fewest": min(counts) if counts else None,
        "largest_gap_s": round(max(b - a for a, b in zip(starts, starts[1:], strict=False)), 4),
        "within_1_percent": worst <= 0.01,
    }


def _drive(cluster: Cluster, servers: list[str]) -> dict[str, object]:
    cluster.register(WORKFLOWS)
    for i in range(WORKERS):
        home = servers[i % len(servers)]
        cluster.start_worker(f"w{i}", "--capacity", "8", servers=[home, *[s for s in servers if s != home]])
    clients = [cluster.client_for(s) for s in servers]
    try:
        eventually(lambda: all(
            sum(w.connected for w in c.workers().workers) == WORKERS for c in clients
        ), timeout=60, what="every worker connected")  # fmt: skip
        total = int(_expected() * WINDOWS + RATE_PER_MIN / 60.0 * 5)  # 5 s of margin: never dry
        share = -(-total // len(clients))
        ids: list[str] = []
        for n, client in enumerate(clients):
            ids += [e.execution_id for e in client.map("paced_600", range(n * share, (n + 1) * share))]
        finals = clients[0].wait_all(ids, timeout=WINDOW * WINDOWS + 120)
        starts = [float(f.output_json) for f in finals if f.output_json]
        return {"submitted": len(ids), "started": len(starts), **_figures(starts)}
    finally:
        for c in clients:
            c.close()


def sqlite_run() -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="flux-bench-rate-") as tmp:
        cluster = Cluster(Path(tmp), "grpc")
        try:
            return _drive(cluster, [cluster.start_server("--no-http")])
        finally:
            cluster.close()


def replicas_run(count: int = 3) -> dict[str, object]:
    from flux.testing.postgres import TemporaryPostgres

    with (
        TemporaryPostgres(durable=True) as postgres,
        tempfile.TemporaryDirectory(prefix="flux-bench-rate-pg-") as tmp,
    ):
        cluster = Cluster(Path(tmp), "grpc", db=postgres.database())
        try:
            servers = [cluster.start_server("--no-http")]
            servers += [cluster.start_replica("--no-http") for _ in range(count - 1)]
            return _drive(cluster, servers)
        finally:
            cluster.close()


def main() -> dict[str, object]:
    started = time.monotonic()
    result = {
        "rate": f"{RATE_PER_MIN}/m",
        "window_s": WINDOW,
        "sqlite": sqlite_run(),
        "postgres_3_replicas": replicas_run(3),
        "seconds": round(time.monotonic() - started, 1),
    }
    write("rate_live", result)
    print(result)
    return result


if __name__ == "__main__":
    main()
