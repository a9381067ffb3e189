"""The ticker (flux/dispatcher/transitions/ticker.py) over a real SQLite store, on a fake clock,
with a fake dispatcher handle: two tickers sharing one store fire each tick once; overlap
skip, queue and cancel-previous; a failed claim leaves the tick due for the next step."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from flux.dispatcher.state.schedules import ScheduleBook
from flux.dispatcher.transitions.ticker import RELOAD_EVERY, Ticker, TickerHandle
from flux.domain.execution import Execution, State, WorkflowRef
from flux.domain.schedule import Schedule
from flux.store import SqliteStore


class Fake:
    """The dispatcher as the ticker sees it: submissions recorded, states set by the test."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.submitted: list[tuple[str, str]] = []
        self.states: dict[str, State] = {}
        self.cancelled: list[str] = []

    def handle(self) -> TickerHandle:
        async def submit(tenant: str, workflow: str, items: list[tuple[str, str]]) -> list[Execution]:
            for execution_id, _ in items:
                self.submitted.append((workflow, execution_id))
                self.states.setdefault(execution_id, State.RUNNING)
            return []

        async def cancel(execution_id: str) -> None:
            self.cancelled.append(execution_id)
            self.states[execution_id] = State.CANCELLED

        async def lookup(execution_id: str) -> Execution | None:
            state = self.states.get(execution_id)
            if state is None:
                return None
            ref = WorkflowRef("wf", 1, "h", "e")
            return Execution(execution_id, ref, 1, "null", 1, state=state)

        return TickerHandle(lambda: self.now, submit, cancel, lookup)


async def _nothing(tenant: str, workflow: str) -> None:
    return None


async def _ticker(path: Path, fake: Fake) -> tuple[SqliteStore, Ticker]:
    store = SqliteStore(path)
    await store.open()
    book = ScheduleBook(store, lambda: fake.now, _nothing)
    await book.load()
    return store, Ticker(book, fake.handle())


def _run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(coroutine)


def test_two_tickers_over_one_store_fire_each_tick_once(tmp_path: Path) -> None:
    async def scenario() -> list[tuple[str, str]]:
        fake = Fake()
        store_a, a = await _ticker(tmp_path / "f.db", fake)
        await a.book.create("default", Schedule("beat", "wf", every="1s", overlap="allow"))
        store_b, b = await _ticker(tmp_path / "f.db", fake)
        for _ in range(5):
            fake.now += 1.0
            await a.step(fake.now)
            await b.step(fake.now)
        await store_a.close()
        await store_b.close()
        return fake.submitted

    submitted = _run(scenario())
    assert [execution_id for _, execution_id in submitted] == [f"sch-beat-{t}" for t in range(1001, 1006)]


@pytest.mark.parametrize("overlap", ["skip", "queue", "cancel-previous"])
def test_overlap_with_the_previous_run_unfinished(tmp_path: Path, overlap: str) -> None:
    async def scenario() -> tuple[Fake, list[tuple[float, str, str]]]:
        fake = Fake()
        store, ticker = await _ticker(tmp_path / "f.db", fake)
        await ticker.book.create("default", Schedule("s", "wf", every="1s", overlap=overlap))
        fake.now = 1001.0
        await ticker.step(fake.now)  # fires 1001, which keeps running
        fake.now = 1002.0
        await ticker.step(fake.now)
        fake.states["sch-s-1001"] = State.COMPLETED
        fake.now = 1002.5
        await ticker.step(fake.now)  # a queued tick fires once its previous run finished
        runs = [(r.tick, r.execution_id, r.result) for r in await store.list_runs("default", "s", 10)]
        await store.close()
        return fake, runs

    fake, runs = _run(scenario())
    ids = [execution_id for _, execution_id in fake.submitted]
    if overlap == "skip":
        assert ids == ["sch-s-1001"] and (1002.0, "sch-s-1002", "skipped") in runs
    elif overlap == "queue":
        assert ids == ["sch-s-1001", "sch-s-1002"] and (1002.0, "sch-s-1002", "fired") in runs
    else:
        assert ids == ["sch-s-1001", "sch-s-1002"] and fake.cancelled == ["sch-s-1001"]


def test_a_failed_claim_leaves_the_tick_due(tmp_path: Path) -> None:
    async def scenario() -> list[tuple[str, str]]:
        fake = Fake()
        store, ticker = await _ticker(tmp_path / "f.db", fake)
        await ticker.book.create("default", Schedule("s", "wf", every="1s", overlap="allow"))
        real = store.claim_ticks

        async def broken(*args: object) -> set:
            raise OSError("disk gone")

        store.claim_ticks = broken  # type: ignore[method-assign]
        fake.now = 1001.2
        with pytest.raises(OSError):
            await ticker.step(fake.now)
        store.claim_ticks = real  # type: ignore[method-assign]
        fake.now = 1001.4
        await ticker.step(fake.now)
        await store.close()
        return fake.submitted

    assert [i for _, i in _run(scenario())] == ["sch-s-1001"]


def test_the_database_away_is_a_warning_without_a_traceback_and_the_ticker_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> list[logging.LogRecord]:
        fake = Fake()
        store, ticker = await _ticker(tmp_path / "u.db", fake)
        reloads: list[None] = []

        async def away() -> None:  # what a store raises while its database restarts
            reloads.append(None)
            raise sqlite3.OperationalError("terminating connection due to administrator command")

        ticker.book.reload = away  # type: ignore[method-assign]
        ticker.start()
        await asyncio.sleep(0.01)  # its first step ran: the next one waits for a change
        fake.now += RELOAD_EVERY + 1  # a reload is due at the next step
        ticker.book.changed.set()
        for _ in range(200):  # bounded: until the reload has failed once
            if reloads:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.01)
        running = ticker._task is not None and not ticker._task.done()
        await ticker.stop()
        await store.close()
        assert reloads and running
        return [r for r in caplog.records if "schedule ticker" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="flux"):
        records = _run(scenario())
    assert records and all(r.levelno == logging.WARNING and r.exc_info is None for r in records)
    assert "the store is unavailable" in records[0].getMessage()
