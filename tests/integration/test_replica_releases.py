"""A claim that rides with the rows: one PostgreSQL transaction ends a dependency, releases its
dependent and claims it (flux/store/postgres/writer.py, modes/shared/binder.py ``place_released``).

Against a real database: the three writes share one transaction id (``xmin``), the dispatch is
logged, no replica is told the dependent is pending, and a dependent changed elsewhere first is
neither written nor claimed while the dependency's end still commits.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from flux.domain.execution import Execution, State, WorkflowRef
from flux.store import notices
from flux.store.base import Conflict
from flux.store.postgres import PostgresStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WORKFLOW = WorkflowRef("echo", 1, "0" * 64, "echo")


def _row(execution_id: str, seq: int, **fields: object) -> Execution:
    now = time.time()
    return Execution(
        execution_id, WORKFLOW, seq, "1", 3, state=State.CREATED, created_at=now, updated_at=now, **fields
    )


async def _released_and_claimed(url: str, cancel_b_elsewhere: bool) -> tuple[object, ...]:
    store = PostgresStore(url, "r1")
    await store.open()
    heard: list[notices.Notice] = []
    store.subscribe(heard.append)
    try:
        a, b = _row("a", 1), _row("b", 2, after=("a",), when="succeeded", waiting=1)
        await asyncio.gather(store.save(a), store.save(b))
        if cancel_b_elsewhere:
            with psycopg.connect(url, autocommit=True) as db:
                db.execute(
                    "UPDATE executions SET state = %s WHERE execution_id = 'b'", (int(State.CANCELLED),)
                )
        now = time.time()
        # One loop step, as dependencies.release and the Complete that ends ``a`` make it.
        released = store.save(b.evolve(waiting=0, updated_at=now))
        ended = store.save(a.evolve(state=State.COMPLETED, output_json="1", updated_at=now))
        wanted = b.evolve(state=State.SCHEDULED, worker="w1", generation=b.generation + 1, updated_at=now)
        claim = store.claim([wanted], with_rows=True)
        outcomes = await asyncio.gather(released, ended, claim, return_exceptions=True)
        for _ in range(200):  # a's end is announced in the same transaction as anything about b
            if any(isinstance(n, notices.Finished) and "a" in n.execution_ids for n in heard):
                break
            await asyncio.sleep(0.05)
        with psycopg.connect(url) as db:
            xmins = dict(db.execute("SELECT execution_id, xmin::text FROM executions").fetchall())
            states = dict(db.execute("SELECT execution_id, state FROM executions").fetchall())
            logged = db.execute("SELECT execution_id, generation, worker, replica FROM dispatches").fetchall()
        return outcomes, xmins, states, logged, heard
    finally:
        await store.close()


def _pending(heard: list[notices.Notice]) -> set[str]:
    """Rows announced as pending with nothing to wait for (``b`` was announced waiting, at its submission)."""
    return {
        ref.execution_id
        for n in heard
        if isinstance(n, notices.PendingAdded)
        for ref in n.refs
        if not ref.waiting
    }


def test_the_dependent_is_released_and_claimed_in_the_transaction_that_ends_its_dependency(
    pg_url: str,
) -> None:
    (released, ended, claimed), xmins, states, logged, heard = asyncio.run(
        _released_and_claimed(pg_url, False)
    )
    assert released is None and ended is None
    assert isinstance(claimed, dict) and set(claimed) == {"b"}
    row = claimed["b"]
    assert (row.state, row.worker, row.generation, row.waiting) == (State.SCHEDULED, "w1", 1, 0)
    assert xmins["a"] == xmins["b"], "one transaction: a's end, b's release and b's claim"
    assert (states["a"], states["b"]) == (int(State.COMPLETED), int(State.SCHEDULED))
    assert logged == [("b", 1, "w1", "r1")]
    # Claimed where it was released: no replica is told it is pending (a's end is announced).
    assert "b" not in _pending(heard)
    assert any(isinstance(n, notices.Finished) and "a" in n.execution_ids for n in heard)


def test_a_dependent_changed_elsewhere_first_is_neither_written_nor_claimed(pg_url: str) -> None:
    (released, ended, claimed), _, states, logged, heard = asyncio.run(_released_and_claimed(pg_url, True))
    assert isinstance(released, Conflict) and ended is None and claimed == {}
    assert (states["a"], states["b"]) == (int(State.COMPLETED), int(State.CANCELLED))
    assert logged == [] and "b" not in _pending(heard)


async def _released_while_a_batch_is_in_flight(url: str) -> tuple[object, dict[str, str]]:
    """The release and its riding claim come while another batch of rows is being written: the
    claim waits for the rows queued with it (the next batch), not for the first claim flush."""
    store = PostgresStore(url, "r1")
    await store.open()
    try:
        a, b = _row("a", 1), _row("b", 2, after=("a",), when="succeeded", waiting=1)
        await asyncio.gather(store.save(a), store.save(b))
        writer = store._writes
        connection, entered, go_on = writer._connection, asyncio.Event(), asyncio.Event()

        async def held() -> object:  # the batch taken (its rows, its riding claims), then held
            entered.set()
            await go_on.wait()
            return await connection()

        writer._connection = held  # type: ignore[method-assign]
        other = store.save(_row("x", 3))  # a batch in flight, held
        await asyncio.wait_for(entered.wait(), 10)
        writer._connection = connection  # type: ignore[method-assign]
        now = time.time()
        released = store.save(b.evolve(waiting=0, updated_at=now))
        ended = store.save(a.evolve(state=State.COMPLETED, output_json="1", updated_at=now))
        wanted = b.evolve(state=State.SCHEDULED, worker="w1", generation=b.generation + 1, updated_at=now)
        claim = store.claim([wanted], with_rows=True)
        go_on.set()
        await asyncio.gather(other, released, ended)
        claimed = await claim
        with psycopg.connect(url) as db:
            xmins = dict(db.execute("SELECT execution_id, xmin::text FROM executions").fetchall())
        return claimed, xmins
    finally:
        await store.close()


def test_a_riding_claim_made_while_a_batch_is_in_flight_rides_with_the_next_one(pg_url: str) -> None:
    claimed, xmins = asyncio.run(_released_while_a_batch_is_in_flight(pg_url))
    assert isinstance(claimed, dict) and set(claimed) == {"b"}
    assert xmins["a"] == xmins["b"] != xmins["x"]
