"""Dependencies between executions (issue 44): the pure rules, and the dispatcher over an
in-memory store (held out of the queue, released in the commit that ends the last dependency,
cancelled in a cascade, graphs accepted all or nothing)."""

from __future__ import annotations

import pytest

from flux.dispatcher.state.dependencies import DependencyIndex
from flux.dispatcher.transitions.graphs import GraphItem
from flux.dispatcher.transitions.submission import Overrides
from flux.domain.dependencies import find_cycle, verdict, waiting_summary
from flux.domain.execution import ExecutionError, State
from flux.errors import InvalidArgument, NotFound
from tests.unit.harness import committed, settled

pytestmark = pytest.mark.timeout(10)

CREATED, SCHEDULED, RUNNING = State.CREATED, State.SCHEDULED, State.RUNNING
COMPLETED, FAILED, CANCELLED = State.COMPLETED, State.FAILED, State.CANCELLED


@pytest.mark.parametrize(
    ("when", "state", "expected"),
    [
        ("succeeded", RUNNING, None),
        ("succeeded", COMPLETED, True),
        ("succeeded", FAILED, False),
        ("succeeded", CANCELLED, False),
        ("failed", COMPLETED, False),
        ("failed", FAILED, True),
        ("failed", CANCELLED, True),
        ("finished", COMPLETED, True),
        ("finished", CANCELLED, True),
        ("finished", CREATED, None),
    ],
    ids=lambda v: str(v),
)
def test_verdict(when, state, expected):
    assert verdict(when, state) is expected


def test_waiting_summary_names_what_is_still_open():
    states = {"e1": RUNNING, "e2": CREATED, "e3": COMPLETED}
    assert waiting_summary(["e1", "e2", "e3"], states, "succeeded") == (
        "waiting for 2 of 3 dependencies: e1 RUNNING, e2 CREATED"
    )


@pytest.mark.parametrize(
    ("edges", "cyclic"),
    [([[], [0], [0, 1]], False), ([[1], [0]], True), ([[0]], True), ([[], [2], [1]], True)],
    ids=["diamond", "pair", "self", "later pair"],
)
def test_find_cycle(edges, cyclic):
    assert (find_cycle(edges) is not None) is cyclic


def test_find_cycle_on_a_long_chain_does_not_recurse():
    assert find_cycle([[i - 1] if i else [] for i in range(50_000)]) is None


def test_index_releases_when_the_last_dependency_is_satisfied():
    index = DependencyIndex()
    index.hold("d", ["a", "b"])
    assert index.waiting_on("a") == ["d"]
    assert not index.satisfied("d", "a")
    assert index.satisfied("d", "b")
    assert "d" not in index and not index.dependents


async def _run(flux, after=(), when="", workflow="job"):
    return await flux.d.submit(workflow, "", overrides=Overrides(after=tuple(after), when=when))


async def test_a_dependent_waits_out_of_the_queue_and_is_released_in_the_same_commit(flux):
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=1)
    a = await flux.run()
    assert w.scheduled() == [a]
    d = await _run(flux, [a])
    assert d.state is CREATED and d.waiting == 1 and d.after == (a,)
    assert d.execution_id not in flux.d.queue and d.execution_id in flux.d.dependencies
    assert flux.store.executions[d.execution_id].waiting == 1
    w.claim(a)
    completing = flux.d.complete(w.name, w.token, a, w.generation(a), '{"n": 1}', None)
    import asyncio

    task = asyncio.ensure_future(completing)
    await committed()
    await committed()
    # The dependency's final row and the dependent's release land in one commit.
    stored_a, stored_d = flux.store.executions[a], flux.store.executions[d.execution_id]
    assert (stored_a.state, stored_d.waiting) in ((COMPLETED, 0), (RUNNING, 1))
    await task
    await settled()
    assert flux.store.executions[d.execution_id].waiting == 0
    assert w.scheduled() == [d.execution_id]


async def test_a_failed_dependency_cancels_its_dependents_in_a_cascade(flux):
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=1)
    a = await flux.run()
    b = await _run(flux, [a])
    c = await _run(flux, [b.execution_id])
    ok = await _run(flux, [b.execution_id], when="failed")
    w.claim(a)
    await w.complete(a, None, ExecutionError("ValueError", "no"))
    # max_attempts=3: the first error is retried; fail it for good.
    for _ in range(5):
        if flux.state(a) is FAILED:
            break
        flux.expire(60)
        await settled()
        if a in w.scheduled() or flux.state(a) is SCHEDULED:
            w.claim(a)
            await w.complete(a, None, ExecutionError("ValueError", "no"))
    assert flux.state(a) is FAILED
    await settled()
    assert flux.state(b.execution_id) is CANCELLED
    assert flux.get(b.execution_id).reason == "dependency"
    assert flux.get(b.execution_id).error.message == f"dependency {a} failed"
    assert flux.get(c.execution_id).error.message == f"dependency {b.execution_id} cancelled"
    assert flux.state(ok.execution_id) is SCHEDULED  # when=failed: a cancelled one satisfies it
    assert flux.d.events.counters.dependencies_cancelled == 2
    assert not flux.d.dependencies.open


async def test_a_dependency_finished_already_is_resolved_at_submit(flux):
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=1)
    a = await flux.run()
    w.claim(a)
    await w.complete(a, "1")
    await settled()
    d = await _run(flux, [a])
    assert d.waiting == 0 and d.state is SCHEDULED
    broken = await _run(flux, [a], when="failed")
    assert broken.state is CANCELLED and broken.reason == "dependency"
    assert flux.store.executions[broken.execution_id].state is CANCELLED


async def test_unknown_and_invisible_dependencies_are_refused_naming_the_item(flux):
    await flux.workflow(cpu=1)
    a = await flux.run()
    with pytest.raises(NotFound, match=r"after\[1\]: execution 'nope' does not exist"):
        await _run(flux, [a, "nope"])
    with pytest.raises(NotFound, match=r"after\[0\]"):
        await flux.d.submit("job", "", overrides=Overrides(after=(a,), sees=lambda e: False))
    with pytest.raises(InvalidArgument, match="when must be one of"):
        await _run(flux, [a], when="sometimes")


async def test_a_cancelled_dependent_leaves_the_index(flux):
    await flux.workflow(cpu=1)
    a = await flux.run()
    d = await _run(flux, [a])
    await flux.d.cancel(d.execution_id)
    assert not flux.d.dependencies.open and not flux.d.dependencies.dependents


async def test_a_graph_is_accepted_whole_and_runs_in_order(flux):
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=4)
    items = [
        GraphItem("job", "1"),
        GraphItem("job", "2", after_index=(0,)),
        GraphItem("job", after_index=(0, 1)),
    ]
    a, b, c = await flux.d.submit_graph(items)
    assert (a.state, b.waiting, c.waiting) == (SCHEDULED, 1, 2)
    assert c.after == (a.execution_id, b.execution_id)
    assert w.scheduled() == [a.execution_id]
    w.claim(a.execution_id)
    await w.complete(a.execution_id, "1")
    await settled()
    assert w.scheduled() == [b.execution_id]


@pytest.mark.parametrize(
    ("items", "match"),
    [
        (
            [GraphItem("job", after_index=(1,)), GraphItem("job", after_index=(0,))],
            r"items\[\d\] is on a cycle",
        ),
        ([GraphItem("job", after_index=(5,))], r"items\[0\].after_index\[0\] is 5"),
        ([GraphItem("job"), GraphItem("job", after=("ghost",))], r"items\[1\].after\[0\]: execution 'ghost'"),
        ([GraphItem("job"), GraphItem("job", "{bad")], r"items\[1\].input_json is not valid JSON"),
    ],
    ids=["cycle", "index out of range", "unknown id", "bad input"],
)
async def test_a_bad_graph_is_refused_whole(flux, items, match):
    await flux.workflow(cpu=1)
    with pytest.raises((InvalidArgument, NotFound), match=match):
        await flux.d.submit_graph(items)
    assert not flux.store.executions


async def test_waiting_dependents_survive_a_restart(flux):
    from tests.unit.harness import Flux

    await flux.workflow(cpu=1)
    a = await flux.run()
    d = await _run(flux, [a])
    await settled()
    again = await Flux(flux.store, flux.clock).start()
    try:
        assert d.execution_id in again.d.dependencies and d.execution_id not in again.d.queue
        w = await again.worker(cpu=1)
        assert w.scheduled() == [a]
        w.claim(a)
        await w.complete(a, "1")
        await settled()
        assert w.scheduled() == [d.execution_id]
    finally:
        await again.d.stop()


def test_a_pending_line_carries_a_waiting_rows_dependencies():
    from flux.store import PendingRef, notices

    ref = PendingRef("e1", 7, "job", 2, "acme", 0.0, 3, 12.5, 1, False, ("a", "b"), "finished", 2)
    [back] = notices.parse_pending(notices.pending_line(ref))
    assert back == ref
    plain = PendingRef("e2", 8, "job", 2)
    assert notices.parse_pending(notices.pending_line(plain)) == [plain]


def test_the_graph_builder_sends_nodes_as_indexes_and_ids_as_after():
    import asyncio

    from flux.client.graphs import Graph
    from flux.v1 import control_pb2

    sent = []

    def submit(request):
        sent.append(request)
        return control_pb2.RunWorkflowsResponse(
            executions=[control_pb2.Execution(execution_id=f"id{i}") for i in range(len(request.items))]
        )

    g = Graph(submit)
    a = g.add("extract", {"x": 1})
    b = g.add("load", after=[a, "old", control_pb2.Execution(execution_id="older")], when="finished")
    assert [e.execution_id for e in g.submit()] == ["id0", "id1"]
    [request] = sent
    assert list(request.items[1].after_index) == [0]
    assert list(request.items[1].after) == ["old", "older"] and request.items[1].when == "finished"
    assert request.items[0].input_json == '{"x": 1}' and not request.items[0].when
    assert b.execution_id == "id1"
    with pytest.raises(InvalidArgument, match="when must be one of"):
        g.add("load", after=[a], when="soon")
    with pytest.raises(InvalidArgument, match="node of another graph"):
        Graph(submit).add("x", after=[a])

    async def answer(request):
        return submit(request)

    h = Graph(answer)
    h.add("extract")
    assert [e.execution_id for e in asyncio.run(h.submit())] == ["id0"]


async def test_each_dependency_that_ends_is_counted_off_in_its_own_commit(flux):
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=2)
    a, b = await flux.run(), await flux.run()
    d = await _run(flux, [a, b], when="finished")
    assert flux.store.executions[d.execution_id].waiting == 2
    await flux.d.cancel(a)  # a cancelled dependency satisfies "finished"
    await settled()
    assert flux.store.executions[d.execution_id].waiting == 1
    assert flux.get(d.execution_id).waiting == 1 and d.execution_id in flux.d.dependencies
    w.events()
    w.claim(b)
    await w.complete(b, "2")
    await settled()
    assert w.scheduled() == [d.execution_id]
    assert flux.d.events.counters.dependencies_released == 1


async def test_upstream_holds_each_dependencys_output_or_null(flux):
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=2)
    a, b = await flux.run(), await flux.run()
    d = await _run(flux, [a, b], when="finished")
    w.claim(a)
    await w.complete(a, '{"rows": 3}')
    await flux.d.cancel(b)
    await settled()
    sent = await flux.d.with_upstream(flux.get(d.execution_id))
    assert sent.upstream == ((a, '{"rows": 3}'), (b, "null"))
