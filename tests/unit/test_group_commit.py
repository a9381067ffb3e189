"""The group commit both stores write execution rows through (flux/store/group_commit.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from flux.domain.execution import Execution, State, WorkflowRef
from flux.store import group_commit
from flux.store.base import Conflict
from flux.store.group_commit import GroupCommit

pytestmark = pytest.mark.timeout(10)


def row(execution_id: str, state: State = State.CREATED) -> Execution:
    job = WorkflowRef("job", 1, "h", "job")
    execution = Execution(execution_id=execution_id, workflow=job, seq=1, input_json="null", max_attempts=1)
    return execution.evolve(state=state)


class Database:
    """Records each batch; a batch waits for ``release`` while ``hold`` is set, as a slow commit does."""

    def __init__(self) -> None:
        self.batches: list[list[Execution]] = []
        self.hold = False
        self.release = asyncio.Event()
        self.refuse: set[str] = set()
        self.failure: BaseException | None = None

    async def write(self, batch: list[Execution]) -> set[str]:
        self.batches.append(batch)
        if self.hold:
            await self.release.wait()
        if self.failure is not None:
            raise self.failure
        return {e.execution_id for e in batch} & self.refuse


async def test_saves_made_during_a_commit_share_the_next_one_and_the_latest_row_wins() -> None:
    db = Database()
    commits = GroupCommit(db.write)
    db.hold = True
    first = commits.save(row("a"))
    await asyncio.sleep(0)  # the first batch is in flight
    waits = [commits.save(row("b")), commits.save(row("c")), commits.save(row("b", State.CANCELLED))]
    assert commits.queued("b") is not None and commits.queued("b").state is State.CANCELLED
    db.release.set()
    await asyncio.gather(first, *waits)
    assert [[(e.execution_id, e.state) for e in batch] for batch in db.batches] == [
        [("a", State.CREATED)],
        [("b", State.CANCELLED), ("c", State.CREATED)],
    ]
    assert commits.queued("b") is None


async def test_a_caller_that_goes_away_cancels_only_its_own_wait() -> None:
    db = Database()
    commits = GroupCommit(db.write)
    db.hold = True
    mine, same_row, other = commits.save(row("a")), commits.save(row("a")), commits.save(row("b"))
    await asyncio.sleep(0)
    mine.cancel()
    db.release.set()
    assert await same_row is None and await other is None
    assert [e.execution_id for e in db.batches[0]] == ["a", "b"]  # the write went ahead


async def test_a_refused_row_fails_its_callers_with_conflict_and_the_rest_succeed() -> None:
    db = Database()
    db.refuse = {"a"}
    commits = GroupCommit(db.write)
    a1, b, a2 = commits.save(row("a")), commits.save(row("b")), commits.save(row("a"))
    for refused in (a1, a2):
        with pytest.raises(Conflict) as caught:
            await refused
        assert caught.value.execution_id == "a"
    assert await b is None


async def test_a_failed_batch_fails_every_wait_and_the_next_batch_is_written() -> None:
    db = Database()
    db.failure = OSError("disk full")
    commits = GroupCommit(db.write)
    waits = [commits.save(row("a")), commits.save(row("b"))]
    for wait in waits:
        with pytest.raises(OSError, match="disk full"):
            await wait
    db.failure = None
    assert await commits.save(row("a")) is None
    assert len(db.batches) == 2


async def test_an_interrupted_batch_answers_every_wait_then_stops_the_flusher() -> None:
    class Interrupt(BaseException):
        pass

    db = Database()
    db.failure = Interrupt()
    commits = GroupCommit(db.write)
    wait = commits.save(row("a"))
    with pytest.raises(Interrupt):
        await commits.drain()
    assert isinstance(wait.exception(), Interrupt)
    db.failure = None
    assert await commits.save(row("b")) is None  # a later save starts a new flusher


async def test_the_flusher_alternates_rows_and_the_follow_up() -> None:
    db = Database()
    order: list[str] = []

    class Claims:
        def __init__(self) -> None:
            self.waiting: list[str] = []

        @property
        def queued(self) -> bool:
            return bool(self.waiting)

        async def flush(self) -> None:
            order.extend(self.waiting)
            self.waiting = []

    async def write(batch: list[Execution]) -> set[str]:
        order.extend(f"row {e.execution_id}" for e in batch)
        return await db.write(batch)

    claims = Claims()
    commits = GroupCommit(write, then=claims)
    saved = [commits.save(row("a"))]
    claims.waiting.append("claim a")
    commits.kick()
    await asyncio.gather(*saved)
    await commits.drain()
    assert order == ["row a", "claim a"]  # queued together: the row lands first

    # Queued while a batch is in flight: the claims queued by its end go next, then the rows.
    order.clear()
    db.hold = True
    saved = [commits.save(row("b"))]
    await asyncio.sleep(0)
    saved.append(commits.save(row("c")))
    claims.waiting.append("claim b")
    commits.kick()
    db.release.set()
    await asyncio.gather(*saved)
    await commits.drain()
    assert order == ["row b", "claim b", "row c"]


@pytest.fixture
def gathering(monkeypatch: pytest.MonkeyPatch):
    """Set the gathering's limits for one test: gap, most seconds, most rows."""

    def set_limits(gap: float, most_s: float = 60.0, most_rows: int = 512) -> None:
        monkeypatch.setattr(group_commit, "GATHER_GAP_S", gap)
        monkeypatch.setattr(group_commit, "GATHER_MOST_S", most_s)
        monkeypatch.setattr(group_commit, "GATHER_MOST_ROWS", most_rows)

    return set_limits


def _ids(db: Database) -> list[list[str]]:
    return [[e.execution_id for e in batch] for batch in db.batches]


async def _during_a_commit(
    commits: GroupCommit, db: Database, saves: Callable[[], list[asyncio.Future[None]]]
) -> list[asyncio.Future[None]]:
    """Row ``a`` in flight while ``saves`` queue theirs; returns once ``a`` is committed, with
    every wait (``a``'s first). The next batch is the flusher's to write, gathering or not."""
    db.hold = True
    first = commits.save(row("a"))
    await asyncio.sleep(0)  # the first batch is in flight
    waits = saves()
    db.release.set()
    await first
    return [first, *waits]


async def test_a_lone_writer_never_waits_for_others(gathering) -> None:
    gathering(gap=30.0)  # a gather would outlast the test's timeout
    db = Database()
    commits = GroupCommit(db.write)
    for name in "abc":  # one at a time, as a sequential client writes
        await asyncio.wait_for(commits.save(row(name)), 5)
    assert _ids(db) == [["a"], ["b"], ["c"]]


async def test_writers_seen_together_let_the_next_batch_gather_what_comes_meanwhile(gathering) -> None:
    gathering(gap=0.2)
    db = Database()
    commits = GroupCommit(db.write)
    # Four writers at once: load.
    waits = await _during_a_commit(commits, db, lambda: [commits.save(row(name)) for name in "bcde"])
    waits.append(commits.save(row("f")))  # comes while the next batch gathers: it rides along
    await asyncio.gather(*waits)
    assert _ids(db) == [["a"], list("bcdef")]


@pytest.mark.parametrize(
    ("most_rows", "names"),
    [(512, "bcd"), (4, "bcde")],
    ids=["three writers at once", "a batch already full"],
)
async def test_a_batch_is_written_without_gathering(gathering, most_rows: int, names: str) -> None:
    gathering(gap=30.0, most_rows=most_rows)
    db = Database()
    commits = GroupCommit(db.write)
    waits = await _during_a_commit(commits, db, lambda: [commits.save(row(name)) for name in names])
    await asyncio.wait_for(asyncio.gather(*waits), 5)
    assert _ids(db) == [["a"], list(names)]


async def test_a_bulk_call_alone_is_written_without_gathering(gathering) -> None:
    gathering(gap=30.0)
    db = Database()
    commits = GroupCommit(db.write)
    # One caller, six rows.
    waits = await _during_a_commit(commits, db, lambda: [commits.save_many([row(n) for n in "bcdefg"])])
    await asyncio.wait_for(asyncio.gather(*waits), 5)
    assert _ids(db) == [["a"], list("bcdefg")]


async def test_one_execution_saved_by_many_callers_is_written_without_gathering(gathering) -> None:
    gathering(gap=30.0)
    db = Database()
    commits = GroupCommit(db.write)
    states = (State.CREATED, State.SCHEDULED, State.RUNNING, State.COMPLETED)
    # One run's writes: four callers, one row.
    waits = await _during_a_commit(commits, db, lambda: [commits.save(row("b", s)) for s in states])
    await asyncio.wait_for(asyncio.gather(*waits), 5)
    assert [[(e.execution_id, e.state) for e in batch] for batch in db.batches] == [
        [("a", State.CREATED)],
        [("b", State.COMPLETED)],
    ]


async def test_a_batch_gathers_for_a_bounded_time_while_writes_keep_coming(gathering) -> None:
    gathering(gap=0.05, most_s=0.2)
    db = Database()
    commits = GroupCommit(db.write)
    waits = await _during_a_commit(commits, db, lambda: [commits.save(row(name)) for name in "bcde"])
    # A writer that never pauses for a whole gap: the batch is written all the same.
    for n in range(10_000):
        if len(db.batches) > 1:
            break
        waits.append(commits.save(row(f"x{n}")))
        await asyncio.sleep(0.01)
    assert len(db.batches) > 1, "the gathering batch was never written while writes kept coming"
    await asyncio.gather(*waits)


async def test_a_flusher_interrupted_while_gathering_answers_every_wait(gathering) -> None:
    gathering(gap=30.0)
    db = Database()
    commits = GroupCommit(db.write)
    _, *waits = await _during_a_commit(commits, db, lambda: [commits.save(row(n)) for n in "bcde"])
    await asyncio.sleep(0)  # the flusher is gathering
    assert commits._flusher is not None
    commits._flusher.cancel()
    for wait in waits:
        with pytest.raises(asyncio.CancelledError):
            await wait
    assert commits.queued("b") is None
    assert await asyncio.wait_for(commits.save(row("f")), 5) is None  # a later save is written
