"""Replicas: a dependent released by its dependency's end is claimed in that end's own commit.

One replica on the in-memory shared store (shared_memory_store.py). The store records which
claims were made to ride with the rows (``with_rows``): on PostgreSQL such a claim runs in the
transaction of the next batch of rows (flux/store/postgres/writer.py, tested against a real
database in tests/integration/test_replica_releases.py); here the test settles it, as that commit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flux.dispatcher.state.session import Scheduled
from flux.dispatcher.transitions.submission import Overrides
from flux.domain.execution import State
from tests.unit.harness import Flux, settled
from tests.unit.shared_memory_store import SharedMemoryStore

pytestmark = pytest.mark.timeout(10)


async def _dependent_of_a_running_one(replica: Flux, dependent_cpu: int = 1) -> tuple[str, str, Any]:
    """``a`` running on w1 (one core: all it has), and ``b`` waiting on it."""
    await replica.workflow(cpu=1)
    await replica.workflow("big", cpu=dependent_cpu)
    w = await replica.worker(cpu=1)
    a = await replica.run()  # stored already dispatched: the submit fast path
    w.claim(a)
    b = await replica.d.submit("big", "", overrides=Overrides(after=(a,)))
    assert b.waiting == 1 and b.execution_id in replica.d.dependencies
    w.events()  # a's dispatch, read off
    return a, b.execution_id, w


def _scheduled(w: Any) -> list[str]:
    return [e.execution.execution_id for e in w.events() if isinstance(e, Scheduled)]


async def test_the_dependent_is_claimed_with_the_rows_that_end_its_dependency_then_pushed(replica) -> None:
    store: SharedMemoryStore = replica.store
    a, b, w = await _dependent_of_a_running_one(replica)
    completing = asyncio.ensure_future(replica.d.complete("w1", w.token, a, w.generation(a), "1", None))
    await settled()
    # a's room was freed first, so b is placed there at once; its claim rides with the rows.
    [(dispatches, claim)] = store.claims
    assert [e.execution_id for e in dispatches] == [b] and id(claim) in store.with_rows
    assert replica.holdings("w1") == {b} and b not in replica.d.queue
    # Both rows committed (a final, b released), and nothing is pushed before the claim answers.
    assert (store.executions[a].state, store.executions[b].waiting) == (State.COMPLETED, 0)
    assert _scheduled(w) == []
    store.settle(won={b})
    await settled()
    await completing
    [pushed] = [e.execution for e in w.events() if isinstance(e, Scheduled)]
    assert (pushed.execution_id, pushed.state, pushed.generation) == (b, State.SCHEDULED, 1)
    # Bound once: no second claim after the release's commit, nothing left in line.
    await settled()
    assert store.claims == [] and b not in replica.d.queue and replica.holdings("w1") == {b}


async def test_a_riding_claim_that_fails_puts_the_dependent_back_in_line(replica) -> None:
    store: SharedMemoryStore = replica.store
    a, b, w = await _dependent_of_a_running_one(replica)
    await replica.d.complete("w1", w.token, a, w.generation(a), "1", None)
    [(_, claim)] = store.claims
    store.claims.clear()
    claim.set_exception(OSError("the database is down"))
    await settled()
    assert _scheduled(w) == [] and b in replica.d.queue and replica.holdings("w1") == set()
    assert replica.d.table.get(b).state is State.CREATED  # placed again by a later pass


async def test_a_dependent_no_worker_fits_now_waits_in_line_after_its_release_commits(replica) -> None:
    store: SharedMemoryStore = replica.store
    a, b, w = await _dependent_of_a_running_one(replica, dependent_cpu=8)
    await replica.d.complete("w1", w.token, a, w.generation(a), "1", None)
    await settled()
    assert store.claims == [] and store.executions[b].waiting == 0
    assert b in replica.d.queue and replica.d.table.get(b).state is State.CREATED
