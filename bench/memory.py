"""Server memory under pending and finished work (``make bench``; ``python -m bench memory``).

- RSS before and after 10,000 pending 64 KiB inputs, no workers;
- RSS growth after 40 and after 120 finished executions with 4 MB outputs each.

The figures behind issue 12's "bounded memory": pending inputs above the inline
threshold (16 KiB) wait in the store, not in the server's RAM, so RSS grows by
the per-execution records only; the finished cache keeps at most 16 MiB of
payloads, so RSS levels off however many runs finish. Before the fix the first
load took the server from 209 to 1,642 MiB, and 40 finished 4 MB runs left
397 MiB. A real server process on SQLite, submissions over gRPC from a few
client threads; RSS is read from the server's process (psutil).
"""

from __future__ import annotations

import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from bench.common import write
from flux.testing import Cluster

PENDING = 10_000
INPUT_BYTES = 64 * 1024
CLIENTS = 4
FINISHED = (40, 120)
OUTPUT_BYTES = 4_000_000
MiB = 1024 * 1024

WORKFLOW = """
from flux import workflow


@workflow
async def hold(ctx):
    return None


@workflow
async def big_output(ctx):
    return "x" * ctx.input
"""


def _rss(process: psutil.Process) -> int:
    return process.memory_info().rss


def pending_rss(pending: int = PENDING, input_bytes: int = INPUT_BYTES) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="flux-bench-memory-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            cluster.start_server()
            source = Path(tmp) / "hold.py"
            source.write_text(WORKFLOW)
            cluster.register(source)
            assert cluster.server is not None
            server = psutil.Process(cluster.server.pid)
            # One warm-up submission so imports and first-use allocations are in the baseline.
            cluster.run("hold", "warm", wait=False)
            time.sleep(0.5)
            before = _rss(server)
            # Each input is a JSON string of input_bytes (two quote characters included).
            value = "x" * (input_bytes - 2)
            assert len(json.dumps(value)) == input_bytes
            started = time.perf_counter()
            with ThreadPoolExecutor(CLIENTS) as pool:
                clients = [cluster.client_for(cluster.address) for _ in range(CLIENTS)]
                try:
                    list(
                        pool.map(
                            lambda i: clients[i % CLIENTS].run("hold", value, wait=False), range(pending)
                        )
                    )
                finally:
                    for client in clients:
                        client.close()
            elapsed = time.perf_counter() - started
            time.sleep(1.0)  # let write batches settle
            after = _rss(server)
            queued = sum(cluster.client.status().pending_by_reason.values())
            database = sum(p.stat().st_size for p in Path(tmp).glob("**/*.db*"))
            return {
                "pending": pending,
                "input_bytes": input_bytes,
                "inputs_total_mib": round(pending * input_bytes / MiB, 1),
                "rss_before_mib": round(before / MiB, 1),
                "rss_after_mib": round(after / MiB, 1),
                "rss_growth_mib": round((after - before) / MiB, 1),
                "rss_growth_per_pending_bytes": round((after - before) / pending),
                "database_mib": round(database / MiB, 1),
                "submit_seconds": round(elapsed, 2),
                "queued_reported": queued,
            }
        finally:
            cluster.close()


def finished_rss(
    checkpoints: tuple[int, ...] = FINISHED, output_bytes: int = OUTPUT_BYTES
) -> dict[str, object]:
    """RSS growth after each checkpoint's count of finished runs: it levels off (bounded), not linear."""
    with tempfile.TemporaryDirectory(prefix="flux-bench-memory-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            cluster.start_server()
            source = Path(tmp) / "hold.py"
            source.write_text(WORKFLOW)
            cluster.register(source)
            cluster.start_worker("w1")
            assert cluster.server is not None
            server = psutil.Process(cluster.server.pid)
            cluster.run("big_output", 10, wait=True)
            time.sleep(0.5)
            before = _rss(server)
            growth: dict[str, float] = {}
            done = 0
            for checkpoint in checkpoints:
                for _ in range(checkpoint - done):
                    final = cluster.run("big_output", output_bytes - 2, wait=True)
                    assert len(final.output_json) == output_bytes
                done = checkpoint
                time.sleep(1.0)
                growth[str(checkpoint)] = round((_rss(server) - before) / MiB, 1)
            return {
                "output_bytes": output_bytes,
                "rss_before_mib": round(before / MiB, 1),
                "rss_growth_mib_after_finished": growth,
            }
        finally:
            cluster.close()


def main(pending: int = PENDING) -> dict[str, object]:
    result = {"pending_rss": pending_rss(pending), "finished_rss": finished_rss()}
    write("memory", result)
    return result


if __name__ == "__main__":
    main()
