"""Bulk submission (Dispatcher.submit_many, RunWorkflows): one commit, checked by index, admitted whole."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from flux.cli.commands.many import parse_lines
from flux.client import FluxClient, chunked
from flux.dispatcher.state import validation
from flux.domain.execution import State
from flux.errors import InvalidArgument, NotFound, ResourceExhausted, Unavailable
from flux.v1 import control_pb2
from tests.unit.harness import SETTINGS, Flux
from tests.unit.memory_store import MemoryStore

pytestmark = pytest.mark.timeout(10)


class CountingStore(MemoryStore):
    """Counts the commits that wrote rows: one transaction each."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[int] = []

    def _commit(self) -> None:
        if self._queued and self.fail_next_commit is None:
            self.commits.append(len(self._queued))
        super()._commit()


@pytest.fixture
async def flux():
    f = await Flux(CountingStore()).start()
    yield f
    await f.d.stop()


def inputs(n: int) -> list[str]:
    return [f'{{"n": {i}}}' for i in range(n)]


async def test_a_batch_is_stored_in_one_commit_before_the_answer_in_input_order(flux):
    await flux.workflow(cpu=1)
    executions = await flux.d.submit_many("job", inputs(50))
    assert flux.store.commits == [50]
    assert [flux.store.executions[e.execution_id].input_json for e in executions] == inputs(50)
    assert len({e.execution_id for e in executions}) == 50
    # Each is its own execution, queued in input order (submission order within a priority).
    seqs = [e.seq for e in executions]
    assert seqs == sorted(seqs)
    assert all(e.state is State.CREATED for e in executions)
    assert len(flux.d.pending()) == 50


async def test_an_empty_input_means_null_as_for_one_run(flux):
    await flux.workflow()
    [execution] = await flux.d.submit_many("job", [""])
    assert flux.store.executions[execution.execution_id].input_json == "null"


async def test_the_batch_is_placed_in_one_scoped_pass_in_input_order(flux, monkeypatch):
    await flux.workflow(cpu=1)
    w = await flux.worker(cpu=3)
    passes = []
    place = flux.d.place
    monkeypatch.setattr(flux.d, "place", lambda *a, **k: passes.append(k) or place(*a, **k))
    executions = await flux.d.submit_many("job", inputs(5))
    assert len(passes) == 1 and passes[0]["shapes"] is not None
    ids = [e.execution_id for e in executions]
    # The first three went to the worker (its three CPUs), the other two wait in line.
    assert w.scheduled() == ids[:3]
    assert [e.state for e in executions] == [State.SCHEDULED] * 3 + [State.CREATED] * 2
    # Each keeps its own lifecycle: finishing one dispatches the next in line, and only it.
    w.claim(ids[0])
    await w.complete(ids[0], '"done"')
    assert flux.state(ids[0]) is State.COMPLETED
    assert w.scheduled() == [ids[3]]
    assert flux.state(ids[4]) is State.CREATED


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        pytest.param(['{"ok": 1}', "{oops", "[]"], r"input_json\[1\] is not valid JSON", id="not JSON"),
        pytest.param(["1", "2", "3", "NaN"], r"input_json\[3\] is not valid JSON", id="NaN"),
        pytest.param([], "input_json is empty; give at least one input", id="empty"),
    ],
)
async def test_a_bad_input_refuses_the_whole_batch_naming_its_index(flux, batch, match):
    await flux.workflow()
    with pytest.raises(InvalidArgument, match=match):
        await flux.d.submit_many("job", batch)
    assert flux.store.commits == [] and flux.store.executions == {}
    assert len(flux.d.pending()) == 0


async def test_more_inputs_than_the_cap_are_refused_naming_the_limit(flux):
    await flux.workflow()
    with pytest.raises(ResourceExhausted, match=r"10001 inputs; the limit is 10000 per call"):
        await flux.d.submit_many("job", ["1"] * (validation.MAX_BATCH_INPUTS + 1))
    assert flux.store.executions == {}


async def test_an_unknown_workflow_or_priority_out_of_range_is_refused(flux):
    await flux.workflow()
    with pytest.raises(NotFound, match="'nope' is not registered"):
        await flux.d.submit_many("nope", ["1"])
    with pytest.raises(InvalidArgument, match="priority"):
        await flux.d.submit_many("job", ["1"], priority=5000)
    assert flux.store.executions == {}


async def test_priority_applies_to_every_execution_of_the_batch(flux):
    await flux.workflow()
    executions = await flux.d.submit_many("job", ["1", "2"], priority=7)
    assert [flux.store.executions[e.execution_id].priority for e in executions] == [7, 7]


async def test_the_batch_is_admitted_as_a_whole(flux):
    flux.d.settings = dataclasses.replace(SETTINGS, max_pending=5, max_pending_bytes=100)
    await flux.workflow()
    await flux.d.submit_many("job", ["1", "2"])
    # Four more would make six: none is taken, though three would have fitted.
    with pytest.raises(ResourceExhausted, match=r"these 4 would pass the limit of 5 \(--max-pending\)"):
        await flux.d.submit_many("job", ["3", "4", "5", "6"])
    assert len(flux.store.executions) == 2
    with pytest.raises(ResourceExhausted, match=r"the limit of 100 \(--max-pending-bytes\)"):
        await flux.d.submit_many("job", ['"' + "x" * 60 + '"', '"' + "y" * 60 + '"'])
    assert len(flux.store.executions) == 2
    await flux.d.submit_many("job", ["3", "4", "5"])
    assert len(flux.store.executions) == 5


async def test_batches_whose_commits_are_in_flight_count_against_the_limits(flux):
    flux.d.settings = dataclasses.replace(SETTINGS, max_pending=5)
    await flux.workflow()
    # Side by side: the second is admitted while the first waits for its commit, not yet held.
    first, second = await asyncio.gather(
        flux.d.submit_many("job", ["1", "2", "3"]),
        flux.d.submit_many("job", ["4", "5", "6"]),
        return_exceptions=True,
    )
    assert len(first) == 3
    assert isinstance(second, ResourceExhausted) and "3 executions are unfinished; these 3" in str(second)
    # A single run counts them too.
    batch, single = await asyncio.gather(
        flux.d.submit_many("job", ["7", "8"]), flux.d.submit("job", "9"), return_exceptions=True
    )
    assert len(batch) == 2
    assert isinstance(single, ResourceExhausted) and "5 executions are unfinished; the limit is 5" in str(
        single
    )
    assert len(flux.store.executions) == len(flux.d.table.unfinished) == 5
    assert (flux.d.table.storing_count, flux.d.table.storing_bytes) == (0, 0)


async def test_a_batch_whose_commit_fails_is_refused_and_nothing_is_queued(flux):
    await flux.workflow()
    w = await flux.worker()
    flux.store.fail_next_commit = OSError("disk full")
    with pytest.raises(Unavailable, match="could not store the 3 executions: disk full"):
        await flux.d.submit_many("job", ["1", "2", "3"])
    assert flux.d.table.unfinished == {} and len(flux.d.pending()) == 0
    assert w.events() == [] and flux.store.executions == {}


async def test_large_inputs_of_a_batch_stay_only_in_the_store(flux):
    flux.d.settings = dataclasses.replace(SETTINGS, inline_input_bytes=64)
    await flux.workflow()
    big = '"' + "x" * 200 + '"'
    small, large = await flux.d.submit_many("job", ["1", big])
    assert flux.d.table.unfinished[large.execution_id].input_json == ""
    assert flux.d.table.unfinished[small.execution_id].input_json == "1"
    assert flux.d.table.unfinished.input_bytes == 1 + len(big)


# ---- the client's chunking and the CLI's lines ----------------------------------------------------


def test_inputs_go_in_calls_of_the_per_call_cap_and_byte_budget():
    assert [len(c) for c in chunked(["1"] * 25_001)] == [10_000, 10_000, 5_001]
    big = "x" * 400
    assert [len(c) for c in chunked([big] * 5, max_bytes=1000)] == [2, 2, 1]
    assert [len(c) for c in chunked([big * 10, "1"], max_bytes=1000)] == [1, 1]  # one alone may be larger


def test_a_refusal_of_a_later_call_names_the_index_among_all_inputs(monkeypatch):
    client = FluxClient("127.0.0.1:1")
    calls = []

    def call(method, request, timeout=None):
        calls.append(len(request.input_json))
        if len(calls) == 2:
            raise InvalidArgument("input_json[7] is not valid JSON: oops")
        return control_pb2.RunWorkflowsResponse(
            executions=[control_pb2.Execution(execution_id=str(i)) for i in range(len(request.input_json))]
        )

    monkeypatch.setattr(client, "_call", call)
    with pytest.raises(InvalidArgument, match=r"input_json\[10007\] is not valid JSON"):
        client.run_many_json("job", ["1"] * 10_010)
    assert calls == [10_000, 10]
    client.close()


def test_json_lines_skip_blank_lines_and_name_a_bad_one_by_number():
    assert parse_lines('1\n\n  \n"a"\n', "in.jsonl") == (["1", '"a"'], [1, 4])
    with pytest.raises(InvalidArgument, match=r"in.jsonl:3: not JSON: Expecting property name"):
        parse_lines("1\n2\n{oops\n", "in.jsonl")
    with pytest.raises(InvalidArgument, match="in.jsonl has no input"):
        parse_lines("\n\n", "in.jsonl")
