"""The dispatch figures on PostgreSQL: one server, then two replicas sharing the database.

The same measurements as bench/dispatch.py (gRPC workers, the core alone), on a
throwaway PostgreSQL started once for the run with its defaults (fsync on), and
a fresh database for each scenario. With two replicas the four worker processes
are split between them and submissions alternate between the replicas' clients;
``submit_to_receipt_ms_by_path`` then separates the executions placed by the
replica that took the submission from those another replica heard of through
the database. Compare with the SQLite ``grpc`` figures in dispatch.json.
"""

from __future__ import annotations

import psycopg

from bench.common import write
from bench.dispatch import BURST, SEQUENTIAL, figures, ratios
from flux.testing.postgres import TemporaryPostgres

SCENARIOS = {"postgres_1_replica": 1, "postgres_2_replicas": 2}


def _settings(url: str) -> dict[str, str]:
    with psycopg.connect(url) as db:
        return {name: db.execute(f"SHOW {name}").fetchone()[0] for name in ("server_version", "fsync",
                                                                           "synchronous_commit")}  # fmt: skip


def main(sequential: int = SEQUENTIAL, burst: int = BURST) -> dict[str, object]:
    with TemporaryPostgres(durable=True) as postgres:
        settings = _settings(postgres.url)
        measured = {
            scenario: figures("grpc", db=postgres.database(), replicas=count, sequential=sequential,
                              burst_size=burst)
            for scenario, count in SCENARIOS.items()
        }  # fmt: skip
    result = {
        "store": "postgresql",
        "postgresql": settings,
        "transport": "grpc",
        "sequential_executions": sequential,
        **measured,
        "two_over_one_replica": ratios(measured["postgres_1_replica"], measured["postgres_2_replicas"]),
    }
    write("replicas", result)
    return result


if __name__ == "__main__":
    main()
