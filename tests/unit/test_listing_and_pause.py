"""Listing requests, page tokens, and the dispatcher's listings and pauses over an in-memory store."""

from __future__ import annotations

import pytest

from flux.dispatcher.reads.listing import (
    DEFAULT_PAGE_SIZE,
    execution_query,
    needs_live_state,
    page_token,
    parse_page_token,
)
from flux.domain.execution import State
from flux.errors import InvalidArgument, NotFound
from flux.store.base import ExecutionQuery
from tests.unit.harness import GRACE, Flux, committed

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(("seq", "execution_id"), [(1, "a"), (1733000000000000, "f" * 32), (0, "x:y")])
def test_page_token_round_trips(seq: int, execution_id: str) -> None:
    token = page_token(seq, execution_id)
    assert token.isascii() and "=" not in token  # safe in a URL as is
    assert parse_page_token(token) == (seq, execution_id)


@pytest.mark.parametrize("token", ["garbage!", "bm9wZQ", page_token(1, "")[:-1] + "!", "OjE"])
def test_foreign_page_tokens_are_refused(token: str) -> None:
    with pytest.raises(InvalidArgument, match="page_token is not one a listing returned"):
        parse_page_token(token)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"states": [1, 7]}, r"states\[1\] is 7, not a state; use one of CREATED \(1\)"),
        ({"states": [0]}, r"states\[0\] is 0"),
        ({"page_size": 1001}, "page_size must be between 1 and 1000"),
        ({"page_size": -1}, "page_size must be between"),
        ({"created_after_ms": -5}, "created_after_ms must be >= 0"),
        ({"workflow": "w" * 300}, "workflow is longer than 256"),
    ],
)
def test_bad_requests_name_their_field(kwargs: dict, named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        execution_query(**{"states": (), **kwargs})


def test_a_checked_query() -> None:
    query = execution_query([3, 1, 3], "echo", "w1", 1_500, 0, page_token(9, "e9"))
    assert query == ExecutionQuery(DEFAULT_PAGE_SIZE, (1, 3), "echo", "w1", 1.5, (9, "e9"))
    assert needs_live_state(query)
    assert not needs_live_state(execution_query([4, 5]))
    assert needs_live_state(execution_query([4], worker="w"))


# ---- the dispatcher --------------------------------------------------------------------------------


async def test_a_dispatch_not_yet_written_is_listed_as_it_is(flux: Flux) -> None:
    await flux.workflow()
    worker = await flux.worker("w1")
    first = await flux.run()
    await committed()
    assert worker.scheduled() == [first]
    # The store still says CREATED (a dispatch is written at its claim); the listing says SCHEDULED.
    assert flux.store.executions[first].state is State.CREATED
    found, following = await flux.d.list_executions(execution_query([int(State.SCHEDULED)]))
    assert [(e.execution_id, e.state, e.worker) for e in found] == [(first, State.SCHEDULED, "w1")]
    assert following is None
    found, _ = await flux.d.list_executions(execution_query([int(State.CREATED)]))
    assert found == []
    found, _ = await flux.d.list_executions(execution_query([], worker="w1"))
    assert [e.execution_id for e in found] == [first]


async def test_pages_of_a_filtered_listing(flux: Flux) -> None:
    await flux.workflow()
    await flux.workflow("other")
    ids = [await flux.run() for _ in range(5)]
    await flux.run("other")
    await committed()
    seen: list[str] = []
    query: ExecutionQuery | None = execution_query([], "job", page_size=2)
    pages = 0
    while query is not None:
        found, query = await flux.d.list_executions(query)
        seen += [e.execution_id for e in found]
        pages += 1
    assert seen == ids[::-1] and pages == 3


async def test_workflow_listing(flux: Flux) -> None:
    await flux.workflow("job", cpu=1)
    await flux.workflow("job", cpu=2)
    await flux.workflow("alpha")
    latest = await flux.d.list_workflows()
    assert [(r.name, r.version, n) for r, n in latest] == [("alpha", 1, 1), ("job", 2, 2)]
    assert [(r.version, r.requests.cpu) for r, _ in await flux.d.list_workflows("job")] == [(1, 1), (2, 2)]
    assert [(r.version, n) for r, n in await flux.d.list_workflows("job", 1)] == [(1, 2)]
    with pytest.raises(NotFound, match="has no version 3; it has versions 1 to 2"):
        await flux.d.list_workflows("job", 3)
    with pytest.raises(NotFound, match="workflow 'nope' is not registered"):
        await flux.d.list_workflows("nope")
    with pytest.raises(InvalidArgument, match="version needs name"):
        await flux.d.list_workflows("", 1)


async def test_pause_keeps_held_work_and_resume_dispatches_what_waited(flux: Flux) -> None:
    await flux.workflow()
    worker = await flux.worker("w1")
    running = await flux.run()
    assert worker.scheduled() == [running]
    worker.claim(running)
    entry = await flux.d.set_paused("w1", True)
    assert entry.paused and entry.connected and running in entry.holdings
    waiting = await flux.run()
    assert worker.scheduled() == [] and flux.state(waiting) is State.CREATED
    why = await flux.d.why(waiting)
    assert why.summary == "0/1 workers can run it: 1 is paused"
    assert why.explanation is not None and not why.explanation.infeasible
    await worker.complete(running)  # its own work still completes
    assert flux.state(running) is State.COMPLETED and worker.scheduled() == []
    await flux.d.set_paused("w1", True)  # idempotent
    await flux.d.set_paused("w1", False)
    assert worker.scheduled() == [waiting]
    with pytest.raises(NotFound, match="worker 'ghost' is not known"):
        await flux.d.set_paused("ghost", True)


async def test_a_new_process_under_a_paused_name_stays_paused(flux: Flux) -> None:
    await flux.workflow()
    first = await flux.worker("w1")
    await flux.d.set_paused("w1", True)
    first.disconnect()
    flux.clock.advance(GRACE)  # the old process's grace period is over
    again = await flux.worker("w1")  # no session token: a new process takes the name
    waiting = await flux.run()
    assert again.scheduled() == [] and flux.state(waiting) is State.CREATED
    await flux.d.set_paused("w1", False)
    assert again.scheduled() == [waiting]
