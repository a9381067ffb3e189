"""Schedules as both stores keep them, and the interface the dispatcher's ticker calls.

Two tables. ``schedules``: one row per (tenant, name), the terms as JSON, whether paused, and
``last_tick``, the last tick handled (fired, skipped or missed), which only moves forward
(``MAX``/``GREATEST``), so replicas that both handled a tick agree. ``schedule_runs``: one row per
(tenant, schedule, tick), its run's execution id and what became of the tick (``fired``,
``skipped``, ``queued``): the primary key is what makes a tick fire once, whichever server or
replica claims it first, and however often it restarts. The SQL is shared by SQLite and
PostgreSQL (``p`` is the placeholder, ``?`` or ``%s``), so the two stores cannot drift.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

__all__ = ["ScheduleRow", "ScheduleRows", "TickRun"]

SCHEDULES_TABLE = (
    "CREATE TABLE IF NOT EXISTS schedules (tenant TEXT NOT NULL, name TEXT NOT NULL, spec TEXT NOT NULL, "
    "paused INTEGER NOT NULL DEFAULT 0, last_tick {real} NOT NULL, updated_at {real} NOT NULL, "
    "PRIMARY KEY (tenant, name));\n"
    "CREATE TABLE IF NOT EXISTS schedule_runs (tenant TEXT NOT NULL, schedule TEXT NOT NULL, "
    "tick {real} NOT NULL, execution_id TEXT NOT NULL, result TEXT NOT NULL, at {real} NOT NULL, "
    "PRIMARY KEY (tenant, schedule, tick));\n"
    "CREATE INDEX IF NOT EXISTS schedule_runs_queued ON schedule_runs (tenant, schedule, tick) "
    "WHERE result = 'queued'"
)

# What became of a tick.
FIRED, SKIPPED, QUEUED = "fired", "skipped", "queued"
# Runs kept per schedule (the newest; queued ones are never dropped).
RUNS_KEPT = 100


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    tenant: str
    name: str
    spec: str
    paused: bool
    last_tick: float


@dataclass(frozen=True, slots=True)
class TickRun:
    """One tick of a schedule and its run. A manual tick (``flux schedule trigger``) is at the
    moment it was asked for; its execution id says so (``m`` before the milliseconds)."""

    tenant: str
    schedule: str
    tick: float
    execution_id: str
    result: str
    at: float

    @property
    def key(self) -> tuple[str, str, float]:
        return (self.tenant, self.schedule, self.tick)


def save_sql(p: str) -> str:
    """A schedule's terms, created (with its cursor) or replaced (keeping its cursor and pause)."""
    return (
        f"INSERT INTO schedules VALUES ({p},{p},{p},0,{p},{p}) ON CONFLICT (tenant, name) DO UPDATE SET "
        "spec = excluded.spec, updated_at = excluded.updated_at"
    )


def pause_sql(p: str) -> str:
    return f"UPDATE schedules SET paused = {p}, last_tick = {p}, updated_at = {p} WHERE tenant = {p} AND name = {p}"


def advance_sql(p: str, greatest: str) -> str:
    return f"UPDATE schedules SET last_tick = {greatest}(last_tick, {p}) WHERE tenant = {p} AND name = {p}"


def claim_sql(p: str) -> str:
    return f"INSERT INTO schedule_runs VALUES ({p},{p},{p},{p},{p},{p}) ON CONFLICT DO NOTHING"


def unqueue_sql(p: str) -> str:
    """A queued tick fired: only once, by whoever finds it still queued."""
    return (
        f"UPDATE schedule_runs SET result = '{FIRED}', at = {p} "
        f"WHERE tenant = {p} AND schedule = {p} AND tick = {p} AND result = '{QUEUED}'"
    )


def list_sql(tenant: str, p: str) -> tuple[str, tuple[str, ...]]:
    columns = "tenant, name, spec, paused, last_tick"
    if tenant:
        return f"SELECT {columns} FROM schedules WHERE tenant = {p} ORDER BY tenant, name", (tenant,)
    return f"SELECT {columns} FROM schedules ORDER BY tenant, name", ()


def runs_sql(p: str) -> str:
    return (
        "SELECT tenant, schedule, tick, execution_id, result, at FROM schedule_runs "
        f"WHERE tenant = {p} AND schedule = {p} ORDER BY tick DESC LIMIT {p}"
    )


def latest_fired_sql() -> str:
    """Each schedule's newest fired run: the one an overlap policy looks at after a restart."""
    return (
        "SELECT r.tenant, r.schedule, r.tick, r.execution_id, r.result, r.at FROM schedule_runs r JOIN "
        f"(SELECT tenant, schedule, MAX(tick) AS tick FROM schedule_runs WHERE result = '{FIRED}' "
        "GROUP BY tenant, schedule) m USING (tenant, schedule, tick)"
    )


def queued_sql() -> str:
    return (
        "SELECT tenant, schedule, tick, execution_id, result, at FROM schedule_runs "
        f"WHERE result = '{QUEUED}' ORDER BY tenant, schedule, tick"
    )


def unsubmitted_sql(p: str) -> str:
    """Fired runs claimed before ``p`` whose execution was never stored (the claimer died between
    the claim and the submission): the ticker submits them, with the same id."""
    return (
        "SELECT r.tenant, r.schedule, r.tick, r.execution_id, r.result, r.at FROM schedule_runs r "
        "LEFT JOIN executions e ON e.execution_id = r.execution_id "
        f"WHERE r.result = '{FIRED}' AND r.at < {p} AND r.at >= {p} AND e.execution_id IS NULL"
    )


def prune_sql(p: str) -> str:
    return (
        "DELETE FROM schedule_runs WHERE (tenant, schedule, tick) IN (SELECT tenant, schedule, tick FROM "
        "(SELECT tenant, schedule, tick, result, ROW_NUMBER() OVER (PARTITION BY tenant, schedule "
        f"ORDER BY tick DESC) AS n FROM schedule_runs) ranked WHERE n > {p} AND result <> '{QUEUED}')"
    )


def delete_sqls(p: str) -> tuple[str, str]:
    return (
        f"DELETE FROM schedules WHERE tenant = {p} AND name = {p}",
        f"DELETE FROM schedule_runs WHERE tenant = {p} AND schedule = {p}",
    )


def run_of(row: tuple[object, ...]) -> TickRun:
    tenant, schedule, tick, execution_id, result, at = row
    return TickRun(str(tenant), str(schedule), float(tick), str(execution_id), str(result), float(at))  # type: ignore[arg-type]


class ScheduleRows(abc.ABC):
    """What the schedules need of a store (SQLite and PostgreSQL both keep them)."""

    @abc.abstractmethod
    async def save_schedules(self, rows: list[tuple[str, str, str, float]]) -> None:
        """(tenant, name, JSON terms, cursor) each: created with that cursor, or their terms
        replaced (cursor and pause kept); all or none."""

    @abc.abstractmethod
    async def set_schedule_paused(self, tenant: str, name: str, paused: bool, last_tick: float) -> bool:
        """Pause or resume (the cursor moves to ``last_tick``: a resumed schedule does not run
        the ticks it slept through); whether the schedule exists."""

    @abc.abstractmethod
    async def delete_schedule(self, tenant: str, name: str) -> bool:
        """Forget a schedule and its runs' records (not the runs); whether it was stored."""

    @abc.abstractmethod
    async def list_schedules(self, tenant: str = "") -> list[ScheduleRow]:
        """Every schedule (of ``tenant`` only, when given), by tenant and name."""

    @abc.abstractmethod
    async def claim_ticks(
        self, runs: list[TickRun], advances: list[tuple[str, str, float]]
    ) -> set[tuple[str, str, float]]:
        """Record each tick's run unless its tick is recorded already (a queued run given as
        fired replaces its queued row, once), and move each (tenant, name) cursor forward to
        at least the tick given, in one transaction; the keys of the runs recorded now."""

    @abc.abstractmethod
    async def list_runs(self, tenant: str, name: str, limit: int) -> list[TickRun]:
        """A schedule's newest runs, newest first."""

    @abc.abstractmethod
    async def latest_runs(self) -> list[TickRun]:
        """Every schedule's newest fired run, and every queued run."""

    @abc.abstractmethod
    async def unsubmitted_runs(self, since: float, before: float) -> list[TickRun]:
        """Fired runs recorded in [since, before) whose execution is not stored."""

    @abc.abstractmethod
    async def prune_runs(self, keep: int = RUNS_KEPT) -> int:
        """Drop all but each schedule's ``keep`` newest runs (never a queued one); how many."""
