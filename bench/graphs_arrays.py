"""``python -m bench arrays``: a 100,000-member array accepted (issue 44's target: <= 2 s).

``client.map("array_member", 100_000 inputs, max_concurrent=4)`` against a real server, timed
from the call to its return: every member stored (durable) and answered, the batch made by the
first RunWorkflows call of 10,000 and joined by the other nine. Measured with no worker (the cost
of accepting alone) and with one idle worker connected (the matcher admits 4 and parks the
99,996 others on the batch's budget while the calls go on: what a throttled batch costs the
server while it is being submitted). Then the batch is cancelled and the time to cancel every
unfinished member is reported too. SQLite, and PostgreSQL when ``ARRAYS_POSTGRES=1`` (a
temporary cluster, flux.testing.postgres).

``arrays_section()`` is what the graphs bench (bench/graphs.py, issue 44's dependencies half)
calls for its arrays section; ``main`` runs it alone and writes bench/results/arrays.json.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from bench.common import machine, write

MEMBERS = 100_000
MAX_CONCURRENT = 4
ROUNDS = 3
TASK = Path(__file__).with_name("arrays_workflows.py")
TARGET_S = 2.0


def one_round(db: str, with_worker: bool) -> dict[str, float]:
    from flux.client import FluxClient
    from flux.security import Role
    from flux.testing import Cluster

    with tempfile.TemporaryDirectory(prefix="arrays-") as workdir:
        cluster = Cluster(Path(workdir), db=db)
        client = None
        try:
            cluster.start_server("--no-http")
            assert cluster.server is not None
            server = psutil.Process(cluster.server.pid)
            client = FluxClient(cluster.address, timeout=120, credentials=cluster.credentials(Role.CLIENT))
            client.register_file(TASK)
            if with_worker:
                cluster.start_worker("w1", "--capacity", "8")
                assert client.map("array_member", [1, 2], wait=True, timeout=60)  # warm: the worker is up
            inputs = [{"i": n} for n in range(MEMBERS)]
            cpu_before = sum(server.cpu_times()[:2])
            began = time.perf_counter()
            runs = client.map("array_member", inputs, max_concurrent=MAX_CONCURRENT)
            accepted_s = time.perf_counter() - began
            server_cpu_s = sum(server.cpu_times()[:2]) - cpu_before
            assert len(runs) == MEMBERS and runs.batch_id
            shown = client.batches.get(runs.batch_id)
            assert shown.total == MEMBERS, shown
            began = time.perf_counter()
            cancelled = client.batches.cancel(runs.batch_id)
            cancel_s = time.perf_counter() - began
            assert cancelled.finished, cancelled
            return {
                "accepted_s": round(accepted_s, 3),
                "members_per_s": round(MEMBERS / accepted_s),
                "server_cpu_s": round(server_cpu_s, 3),
                "completed_before_cancel": cancelled.completed,
                "cancel_all_s": round(cancel_s, 3),
            }
        finally:
            if client is not None:
                client.close()
            cluster.close()


def _rounds(db: Callable[[], str], with_worker: bool) -> dict[str, object]:
    """``ROUNDS`` rounds, each on a fresh store from ``db`` (a SQLite file name, or a new database)."""
    each = [one_round(db(), with_worker) for _ in range(ROUNDS)]
    medians = {key: round(statistics.median(r[key] for r in each), 3) for key in each[0]}
    return {**medians, "within_target": medians["accepted_s"] <= TARGET_S, "each": each}


def arrays_section() -> dict[str, object]:
    """The arrays figures, for the graphs bench's JSON (and this bench's own)."""
    stores: dict[str, object] = {
        "sqlite": {
            "no_worker": _rounds(lambda: "flux.db", False),
            "one_worker": _rounds(lambda: "flux.db", True),
        }
    }
    if os.environ.get("ARRAYS_POSTGRES") == "1":
        from flux.testing.postgres import TemporaryPostgres

        with TemporaryPostgres() as pg:
            stores["postgres"] = {
                "no_worker": _rounds(pg.database, False),
                "one_worker": _rounds(pg.database, True),
            }
    return {
        "members": MEMBERS,
        "max_concurrent": MAX_CONCURRENT,
        "rounds": ROUNDS,
        "target_s": TARGET_S,
        "stores": stores,
        "caveats": [
            "accepted_s is the client's whole map call: the inputs encoded, ten RunWorkflows calls of "
            "10,000 (one durable commit each) and the answers read.",
            "With a worker, members run meanwhile (at most 4 at once); cancel_all_s cancels the rest.",
        ],
    }


def main() -> dict[str, object]:
    result: dict[str, object] = {"machine": machine(), **arrays_section()}
    write("arrays", result)
    return result


if __name__ == "__main__":
    main()
