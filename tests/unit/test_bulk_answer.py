"""The bulk paths' cheap parts (issue 44's array target): RunWorkflows' answers built from one
encoded template per run of alike members, the same message as the per-member conversion; ids
made in bulk; members copied from a template; rows saved with one future."""

from __future__ import annotations

import asyncio
import re

import pytest

from flux.dispatcher.transitions.submission import new_ids
from flux.domain.execution import Copier, Execution, ExecutionError, State, WorkflowRef, copies
from flux.domain.gang import GangRun
from flux.domain.policy import default_policy
from flux.server.bulk_answer import bulk_answer, graph_answer
from flux.server.convert import accepted_to_proto, execution_to_proto
from flux.store.base import Conflict
from flux.store.group_commit import GroupCommit
from flux.v1 import control_pb2

pytestmark = pytest.mark.timeout(10)

JOB = WorkflowRef("job", 2, "h" * 64, "job")


def members(n: int, **shared: object) -> list[Execution]:
    template = Execution("", JOB, 0, "", 3, created_at=1.25, updated_at=1.25, **shared)  # type: ignore[arg-type]
    return copies(
        template,
        ("execution_id", "seq", "input_json"),
        ((i, s, f'{{"i": {s}}}') for s, i in enumerate(new_ids(n))),
    )


def old_answer(executions: list[Execution], batch_id: str = "") -> control_pb2.RunWorkflowsResponse:
    return control_pb2.RunWorkflowsResponse(
        executions=[execution_to_proto(e.evolve(input_json="")) for e in executions], batch_id=batch_id
    )


def test_the_bulk_answer_is_the_per_member_answer_whatever_differs_between_members() -> None:
    batch = members(300, batch_id="b-1", flow_keys=(("batch", "b-1"), ("batch_max", "4")), tenant="acme")
    batch[3] = batch[3].evolve(state=State.SCHEDULED, worker="w1", generation=1, gpu_indices=(0, 1))
    batch[4] = batch[4].evolve(flow_keys=(("concurrency", "k4"),))  # its own key
    batch[5] = batch[5].evolve(execution_id="sch-nightly-" + "7" * 150)  # a long id: a 2-byte length
    batch[6] = batch[6].evolve(policy=default_policy(5), gang=GangRun(2), priority=-7)
    batch[7] = batch[7].evolve(state=State.FAILED, error=ExecutionError("E", "boom", "tb", ("Base",)))
    batch[8] = batch[8].evolve(state=State.CANCELLED)  # each field alone
    batch[10] = batch[10].evolve(worker="w2")
    batch[12] = batch[12].evolve(after=("x",), when="failed", waiting=1)
    answer = bulk_answer(batch, "b-1")
    assert answer == old_answer(batch, "b-1")
    assert answer.SerializeToString() == old_answer(batch, "b-1").SerializeToString()
    assert [e.execution_id for e in answer.executions] == [e.execution_id for e in batch]
    assert all(not e.input_json for e in answer.executions)
    assert bulk_answer(batch[:1]) == old_answer(batch[:1])


def test_the_graph_answer_is_the_per_item_accepted_form() -> None:
    items = members(200)
    ids = [e.execution_id for e in items]
    items = [
        e.evolve(after=tuple(ids[max(0, i - 4) : i]), when="succeeded" if i else "", waiting=min(i, 4) % 3)
        for i, e in enumerate(items)
    ]
    items[9] = items[9].evolve(
        state=State.CANCELLED,
        reason="dependency",
        error=ExecutionError("DependencyFailed", "dependency failed", ""),
    )
    expected = control_pb2.RunWorkflowsResponse(executions=[accepted_to_proto(e) for e in items])
    assert graph_answer(items) == expected
    assert graph_answer(items).SerializeToString() == expected.SerializeToString()


def test_new_ids_are_unique_32_hex_digits_in_increasing_order_and_differ_between_calls() -> None:
    first, second = new_ids(10_000), new_ids(10_000)
    for ids in (first, second):
        assert len(set(ids)) == 10_000 and ids == sorted(ids)
        assert all(re.fullmatch("[0-9a-f]{32}", i) for i in ids)
    assert not set(first) & set(second)
    assert first[0][:16] != second[0][:16]  # each call its own random half
    assert len(new_ids(1)) == 1


def test_copies_are_evolves_of_the_template() -> None:
    template = Execution("", JOB, 0, "", 3, created_at=2.0, tenant="acme", batch_id="b-2")
    made = copies(template, ("execution_id", "seq"), [("a", 1), ("b", 2)])
    assert made == [template.evolve(execution_id="a", seq=1), template.evolve(execution_id="b", seq=2)]
    assert Copier(template, ("state",))((State.RUNNING,)) == template.evolve(state=State.RUNNING)
    with pytest.raises(TypeError, match="named twice or unknown"):
        Copier(template, ("seq", "seq"))
    with pytest.raises(TypeError, match="named twice or unknown"):
        Copier(template, ("nonsense",))


async def test_save_many_is_one_future_for_rows_committed_in_one_batch() -> None:
    batches: list[list[str]] = []
    refuse: set[str] = set()

    async def write(batch: list[Execution]) -> set[str]:
        batches.append([e.execution_id for e in batch])
        return {e.execution_id for e in batch} & refuse

    commits = GroupCommit(write)
    rows = members(5)
    one = commits.save(rows[0])
    many = commits.save_many(rows[1:])
    assert await many is None and await one is None
    assert batches == [[e.execution_id for e in rows]]  # one transaction
    refuse.add(rows[2].execution_id)
    with pytest.raises(Conflict) as caught:
        await commits.save_many(rows[1:])
    assert caught.value.execution_id == rows[2].execution_id
    assert await asyncio.shield(commits.save_many(rows[:1])) is None
