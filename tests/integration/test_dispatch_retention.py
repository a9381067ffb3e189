"""The PostgreSQL ``dispatches`` log is bounded: rows of executions finished longer ago than
``--dispatch-retention`` are deleted by the replicas' housekeeping. Real server, worker and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest

from flux.store.postgres import PostgresStore
from flux.testing import Cluster, eventually

from .conftest import WORKFLOWS

pytestmark = pytest.mark.integration

FAST = ("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")


def rows(url: str, query: str) -> list[tuple]:
    with psycopg.connect(url) as db:
        return db.execute(query).fetchall()


def logged(url: str) -> set[str]:
    return {execution_id for (execution_id,) in rows(url, "SELECT execution_id FROM dispatches")}


def test_dispatches_of_finished_executions_go_after_the_retention(tmp_path: Path, pg_url: str) -> None:
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST, "--dispatch-retention", "1")
        c.register(WORKFLOWS)
        c.start_worker("w1", "--cpus", "4")
        running = c.run("blocking", 600, wait=False).execution_id
        eventually(lambda: running in logged(pg_url), what="the long execution's dispatch to be logged")
        finished = {c.run("echo", n).execution_id for n in range(3)}  # logged, as the next test shows
        # Past the retention the finished ones' rows go; the running one's stays, however old.
        eventually(
            lambda: logged(pg_url) == {running}, timeout=30, what=lambda: f"pruned to {logged(pg_url)}"
        )
        executions = {execution_id for (execution_id,) in rows(pg_url, "SELECT execution_id FROM executions")}
        assert executions == finished | {running}, "retention drops the log, never an execution"
        assert "dispatches of executions finished over 1s ago" in (tmp_path / "server.log").read_text()
    finally:
        c.close()


def test_pruning_goes_in_batches_and_keeps_what_is_recent_or_unfinished(tmp_path: Path, pg_url: str) -> None:
    c = Cluster(tmp_path, db=pg_url)
    try:
        c.start_server(*FAST)  # the default retention (7 days): nothing is due
        c.register(WORKFLOWS)
        c.start_worker("w1", "--cpus", "4")
        running = c.run("blocking", 600, wait=False).execution_id
        finished = [c.run("echo", n).execution_id for n in range(5)]
        eventually(lambda: len(logged(pg_url)) == 6, what="six dispatches to be logged")
    finally:
        c.close()
    # Back-date two of the finished ones and the running one, as if they were a week old.
    with psycopg.connect(pg_url) as db:
        for execution_id in (*finished[:2], running):
            db.execute("UPDATE executions SET updated_at = 1000 WHERE execution_id = %s", (execution_id,))
            db.execute("UPDATE dispatches SET at = 1000 WHERE execution_id = %s", (execution_id,))

    async def prune() -> tuple[int, int]:
        store = PostgresStore(pg_url, "pruner")
        await store.open()
        try:
            old = await store.prune_dispatches(before=2000, batch=1)  # two transactions of one row
            everything = await store.prune_dispatches(before=time.time() + 60, batch=2)
            return old, everything
        finally:
            await store.close()

    old, everything = asyncio.run(prune())
    assert old == 2
    assert everything == 3 and logged(pg_url) == {running}
