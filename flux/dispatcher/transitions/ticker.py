"""The ticker: fires the schedules' due ticks, once each, on one server or on every replica.

One task per server. Each step asks ``flux.domain.schedule.due`` which ticks of each schedule
have come (catch-up decides which missed ones still run), applies the overlap policy against the
schedule's previous run, then records every tick in one store transaction (``claim_ticks``):
the runs' primary key lets one claimer record a tick, whichever replica or restarted server
comes first, and only the claimer submits the tick's run, under an id derived from the schedule
and the tick. The runs of one workflow go in one submission (one commit).

A server that dies between its claim and its submission leaves a fired run without an execution;
``repair`` submits such runs, with the same id, once they are ``REPAIR_AFTER`` seconds old (any
replica may; the store takes the id once).

The ticker sleeps until the next tick's firing time, at most ``MAX_SLEEP``; a change to the
schedules wakes it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flux.dispatcher.state.schedules import Held, ScheduleBook
from flux.dispatcher.transitions import submission
from flux.domain.execution import Execution, State
from flux.domain.schedule import due, execution_id_for, jitter_of, manual_id_for, next_tick
from flux.errors import FluxError, Unavailable
from flux.store import TickRun, schedule_rows

FIRED, SKIPPED, QUEUED = schedule_rows.FIRED, schedule_rows.SKIPPED, schedule_rows.QUEUED

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle

log = logging.getLogger("flux.schedules")

MAX_SLEEP = 1.0
# A step never follows the last at once: a tick due at the same moment is in the same step anyway.
MIN_SLEEP = 0.005
# Schedules are read again this often (replicas: changes made through another one).
RELOAD_EVERY = 2.0
# A fired run without an execution this old is submitted again (its claimer died), up to REPAIR_WITHIN.
REPAIR_AFTER = 10.0
REPAIR_WITHIN = 3600.0
PRUNE_EVERY = 60.0


@dataclass(frozen=True, slots=True)
class TickerHandle:
    """What the ticker may do to the dispatcher: submit runs with given ids, cancel one, read one."""

    clock: Callable[[], float]
    # (tenant, workflow, [(execution id, input JSON)]) -> the executions stored.
    submit: Callable[[str, str, list[tuple[str, str]]], Awaitable[list[Execution]]]
    cancel: Callable[[str], Awaitable[object]]
    # The execution as known now (memory, then the store), or None.
    lookup: Callable[[str], Awaitable[Execution | None]]


class Ticker:
    def __init__(self, book: ScheduleBook, handle: TickerHandle):
        self.book = book
        self.handle = handle
        # Ticks by what became of them (flux_schedule_ticks_total{result}).
        self.counts: Counter[str] = Counter()
        self._finished: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.book.rows is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="flux-schedule-ticker")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        clock = self.handle.clock
        reloaded = repaired = pruned = clock()
        # The store's "database away" errors (e.g. PostgreSQL restarting): a warning, not a bug.
        unavailable: tuple[type[BaseException], ...] = getattr(self.book.rows, "unavailable", ())
        while True:
            now = clock()
            try:
                if now - reloaded >= RELOAD_EVERY:
                    reloaded = now
                    await self.book.reload()
                wake = await self.step(now)
                if now - repaired >= REPAIR_AFTER:
                    repaired = now
                    await self.repair(now)
                if now - pruned >= PRUNE_EVERY:
                    pruned = now
                    await self.book.store().prune_runs(schedule_rows.RUNS_KEPT)
            except asyncio.CancelledError:
                raise
            except unavailable as exc:
                log.warning(
                    "the schedule ticker's step failed, the store is unavailable (%s); trying again", exc
                )
                wake = clock() + MAX_SLEEP
            except Exception:
                log.exception("the schedule ticker's step failed; trying again")
                wake = clock() + MAX_SLEEP
            self.book.changed.clear()
            delay = max(MIN_SLEEP, min(wake - clock(), MAX_SLEEP))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.book.changed.wait(), delay)

    async def step(self, now: float) -> float:
        """Fire every due tick; when the next one is due."""
        runs: list[TickRun] = []
        advances: list[tuple[str, str, float]] = []
        cancels: dict[tuple[str, str, float], str] = {}
        missed: dict[tuple[str, str], int] = {}
        wake = now + MAX_SLEEP
        for (tenant, name), held in list(self.book.held.items()):
            if held.paused:
                continue
            previous = held.last_run
            if held.queued and await self._done(previous, now):
                first = held.queued[0]
                runs.append(TickRun(tenant, name, first.tick, first.execution_id, FIRED, now))
                previous = runs[-1]
            plan = due(held.schedule, tenant, held.cursor, now)
            if plan.cursor != held.cursor:
                advances.append((tenant, name, plan.cursor))
                missed[(tenant, name)] = plan.missed
            for tick in plan.fire:
                run = TickRun(tenant, name, tick, execution_id_for(tenant, name, tick), FIRED, now)
                overlap = held.schedule.overlap
                if overlap != "allow" and previous is not None and not await self._done(previous, now):
                    if overlap == "skip":
                        run = TickRun(tenant, name, tick, run.execution_id, SKIPPED, now)
                    elif overlap == "queue":
                        run = TickRun(tenant, name, tick, run.execution_id, QUEUED, now)
                    else:
                        cancels[run.key] = previous.execution_id
                runs.append(run)
                if run.result == FIRED:
                    previous = run
            upcoming = next_tick(held.schedule, plan.cursor)
            wake = min(wake, upcoming + jitter_of(held.schedule, tenant, upcoming))
        if runs or advances:
            await self._record(runs, advances, cancels)
        # Only once the claim committed: a store that failed it leaves the cursors where they
        # were, so the next step finds the same ticks due.
        for tenant, name, cursor in advances:
            held = self.book.held.get((tenant, name))
            if held is not None and cursor > held.cursor:
                held.cursor = cursor
            self.counts["missed"] += missed.get((tenant, name), 0)
        return wake

    async def _record(
        self,
        runs: list[TickRun],
        advances: list[tuple[str, str, float]],
        cancels: dict[tuple[str, str, float], str] | None = None,
    ) -> list[TickRun]:
        """Claim the runs; submit the fired ones this server claimed. The claimed runs."""
        claimed_keys = await self.book.store().claim_ticks(runs, advances)
        claimed = [run for run in runs if run.key in claimed_keys]
        for run in runs:
            if run.key not in claimed_keys and run.result == FIRED:
                self.book.lost(run)  # a queued tick another replica fired first
        for run in claimed:
            self.book.recorded(run)
            self.counts[run.result] += 1
        for run in claimed:
            victim = (cancels or {}).get(run.key)
            if victim is not None:
                try:
                    await self.handle.cancel(victim)
                    self.counts["cancelled_previous"] += 1
                except FluxError:
                    pass  # finished meanwhile
        await self._submit([run for run in claimed if run.result == FIRED])
        return claimed

    async def _submit(self, runs: list[TickRun]) -> None:
        groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for run in runs:
            held = self.book.held.get((run.tenant, run.schedule))
            if held is None:
                continue
            key = (run.tenant, held.schedule.workflow)
            groups.setdefault(key, []).append((run.execution_id, held.schedule.input_json))
        for (tenant, workflow), items in groups.items():
            try:
                await self.handle.submit(tenant, workflow, items)
            except Unavailable:
                log.warning("could not store %d scheduled runs of %s; repaired later", len(items), workflow)
            except FluxError as exc:
                self.counts["refused"] += len(items)
                log.warning("scheduled runs of %s (tenant %s) refused: %s", workflow, tenant, exc)

    async def _done(self, run: TickRun | None, now: float) -> bool:
        """Whether ``run`` finished (None: there was none). A run not stored yet is unfinished
        for a while (its claimer is storing it), then counted finished (it never will be)."""
        if run is None or run.execution_id in self._finished:
            return True
        found = await self.handle.lookup(run.execution_id)
        if found is None:
            return now - run.at > REPAIR_AFTER * 3
        if found.state.finished:
            self._finished.add(run.execution_id)
            if len(self._finished) > 100_000:
                self._finished.clear()
        return found.state.finished

    async def trigger(self, tenant: str, name: str) -> TickRun:
        """A manual tick, now, whatever the overlap policy: its run's id says it was manual."""
        held: Held = self.book.get(tenant, name)
        now = self.handle.clock()
        # Never a whole second: a manual tick cannot take a clock tick's place in schedule_runs.
        tick = round(now * 1000) / 1000 + 0.0001
        run = TickRun(tenant, name, tick, manual_id_for(tenant, name, now), FIRED, now)
        claimed = await self._record([run], [])
        if not claimed:
            raise Unavailable(f"schedule {name!r} was triggered at this very moment already; try again")
        self.counts["manual"] += 1
        self.counts[FIRED] -= 1
        found = await self.handle.lookup(run.execution_id)
        if found is None:
            raise Unavailable(
                f"the triggered run {run.execution_id} of schedule {held.schedule.name!r} was not stored"
            )
        return run

    async def repair(self, now: float) -> int:
        """Submit fired runs whose claimer died before storing them; how many."""
        lost = await self.book.store().unsubmitted_runs(now - REPAIR_WITHIN, now - REPAIR_AFTER)
        if lost:
            log.warning("submitting %d scheduled runs whose claimer stopped before storing them", len(lost))
            await self._submit(lost)
            self.counts["repaired"] += len(lost)
        return len(lost)


def state_label(run: TickRun, execution: Execution | None) -> str:
    """What ``flux schedule show`` says of a run: its execution's state, or the tick's fate."""
    if run.result != FIRED:
        return run.result.upper()
    if execution is None:
        return "NOT STORED"
    return State(execution.state).name


def handle_of(d: Handle) -> TickerHandle:
    """The dispatcher's few operations the ticker uses."""

    async def submit(tenant: str, workflow: str, items: list[tuple[str, str]]) -> list[Execution]:
        ids, inputs = [i for i, _ in items], [text for _, text in items]
        return await submission.submit_many(d, workflow, inputs, tenant=tenant, every_workflow=False, ids=ids)

    async def lookup(execution_id: str) -> Execution | None:
        return d.current(execution_id) or await d.store.get_execution(execution_id)

    return TickerHandle(d.clock, submit, d.cancel, lookup)
