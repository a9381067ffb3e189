"""The tenants' schedules (``flux schedule create nightly --workflow report --cron "0 2 * * *"``):
kept in the store, held in memory for the ticker (transitions/ticker.py), written through on
each change.

Each schedule is held with its cursor (the last tick handled) and whether it is paused; and,
for the overlap policies, its newest fired run and the ticks queued behind it. On PostgreSQL
replicas every replica's ticker reads the schedules again every few seconds (``reload``): a
change made through another replica applies there within that time, and the runs' primary
key keeps a tick from firing twice meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flux.domain.schedule import Schedule
from flux.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from flux.store import ScheduleRows, TickRun, schedule_rows

FIRED, QUEUED = schedule_rows.FIRED, schedule_rows.QUEUED

if TYPE_CHECKING:
    from flux.store import Store

Key = tuple[str, str]


@dataclass(slots=True)
class Held:
    """A schedule as the ticker works on it."""

    schedule: Schedule
    paused: bool
    cursor: float
    # Its newest fired run (what overlap looks at), and the ticks queued behind it, oldest first.
    last_run: TickRun | None = None
    queued: list[TickRun] = field(default_factory=list)
    # Its terms as stored (JSON): a reload parses only what changed.
    spec: str = ""


class ScheduleBook:
    def __init__(
        self, store: Store, clock: Callable[[], float], check_workflow: Callable[[str, str], Awaitable[None]]
    ):
        self.rows: ScheduleRows | None = store if isinstance(store, ScheduleRows) else None
        self.clock = clock
        # Raises when ``tenant`` may not run the workflow (unknown, or another tenant's).
        self.check_workflow = check_workflow
        self.held: dict[Key, Held] = {}
        # Set on every change: the ticker looks again at once instead of at its next wake-up.
        self.changed = asyncio.Event()

    def store(self) -> ScheduleRows:
        if self.rows is None:
            raise FailedPrecondition("this server's store keeps no schedules")
        return self.rows

    async def load(self) -> None:
        """Read every schedule, with its newest run and queued ticks (at start)."""
        if self.rows is None:
            return
        await self.reload()
        for run in await self.rows.latest_runs():
            held = self.held.get((run.tenant, run.schedule))
            if held is None:
                continue
            if run.result == QUEUED:
                held.queued.append(run)
            elif held.last_run is None or run.tick > held.last_run.tick:
                held.last_run = run

    async def reload(self) -> None:
        """Read the schedules again: new ones held, gone ones dropped, terms and pause replaced,
        each cursor moved forward to the stored one (another replica handled those ticks)."""
        if self.rows is None:
            return
        fresh: dict[Key, Held] = {}
        for row in await self.rows.list_schedules():
            held = self.held.get((row.tenant, row.name))
            # Parsed again only when its terms changed: a reload of 1,000 schedules costs a read.
            if held is None or held.spec != row.spec:
                schedule = Schedule.from_dict(json.loads(row.spec), row.name)
            else:
                schedule = held.schedule
            if held is None:
                fresh[(row.tenant, row.name)] = Held(schedule, row.paused, row.last_tick, spec=row.spec)
            else:
                held.schedule, held.paused, held.spec = schedule, row.paused, row.spec
                held.cursor = row.last_tick if row.paused else max(held.cursor, row.last_tick)
                fresh[(row.tenant, row.name)] = held
        self.held = fresh

    def list(self, tenant: str) -> list[tuple[Schedule, Held]]:
        return [(h.schedule, h) for (t, _), h in sorted(self.held.items()) if t == tenant]

    def get(self, tenant: str, name: str) -> Held:
        held = self.held.get((tenant, name))
        if held is None:
            raise NotFound(
                f"schedule {name!r} does not exist in tenant {tenant!r}; create it with: "
                f"flux schedule create {name} --workflow WF --cron EXPR"
            )
        return held

    async def create(self, tenant: str, schedule: Schedule) -> Held:
        if (tenant, schedule.name) in self.held:
            raise AlreadyExists(
                f"schedule {schedule.name!r} already exists in tenant {tenant!r}; "
                "replace it with: flux schedule apply FILE, or delete it first"
            )
        [held] = await self.apply(tenant, [schedule])
        return held

    async def apply(self, tenant: str, schedules: list[Schedule]) -> list[Held]:
        """Create or replace each schedule by name, all of them or none. A new schedule's first
        tick is the first after now (nothing before it is caught up); a replaced one keeps its cursor."""
        names = [s.name for s in schedules]
        if len(set(names)) != len(names):
            repeated = next(n for n in names if names.count(n) > 1)
            raise InvalidArgument(f"schedule {repeated!r} is given more than once; give each schedule once")
        for index, schedule in enumerate(schedules):
            try:
                await self.check_workflow(tenant, schedule.workflow)
            except NotFound as exc:
                where = "workflow" if len(schedules) == 1 else f"schedules[{index}].workflow"
                raise InvalidArgument(f"{where}: {exc}") from None
        now = self.clock()
        specs = [json.dumps(s.to_dict()) for s in schedules]
        await self.store().save_schedules(
            [(tenant, s.name, spec, now) for s, spec in zip(schedules, specs, strict=True)]
        )
        done = []
        for schedule, spec in zip(schedules, specs, strict=True):
            held = self.held.get((tenant, schedule.name))
            if held is None:
                held = self.held[(tenant, schedule.name)] = Held(schedule, False, now)
            held.schedule, held.spec = schedule, spec
            done.append(held)
        self.changed.set()
        return done

    async def delete(self, tenant: str, name: str) -> None:
        self.get(tenant, name)
        await self.store().delete_schedule(tenant, name)
        self.held.pop((tenant, name), None)
        self.changed.set()

    async def set_paused(self, tenant: str, name: str, paused: bool) -> Held:
        """Pause, or resume from now: the ticks a paused schedule slept through never run."""
        held = self.get(tenant, name)
        now = self.clock()
        cursor = max(held.cursor, now)
        if not await self.store().set_schedule_paused(tenant, name, paused, cursor):
            raise NotFound(f"schedule {name!r} does not exist in tenant {tenant!r}")
        held.paused, held.cursor = paused, cursor
        self.changed.set()
        return held

    def recorded(self, run: TickRun) -> None:
        """A run this server recorded (fired, skipped or queued): remembered for overlap."""
        held = self.held.get((run.tenant, run.schedule))
        if held is None:
            return
        if run.result == QUEUED:
            held.queued.append(run)
        elif run.result == FIRED:
            held.queued = [q for q in held.queued if q.tick != run.tick]
            if held.last_run is None or run.tick >= held.last_run.tick:
                held.last_run = run

    def lost(self, run: TickRun) -> None:
        """A tick this server tried to fire and another fired first: no longer queued here."""
        held = self.held.get((run.tenant, run.schedule))
        if held is not None:
            held.queued = [q for q in held.queued if q.tick != run.tick]

    async def runs(self, tenant: str, name: str, limit: int) -> list[TickRun]:
        self.get(tenant, name)
        return await self.store().list_runs(tenant, name, limit)

    def summary(self) -> dict[str, Any]:
        """How many schedules are active and paused (metrics)."""
        paused = sum(1 for h in self.held.values() if h.paused)
        return {"active": len(self.held) - paused, "paused": paused}
