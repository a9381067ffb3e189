"""The Execution record's own behaviour: ``evolve`` is ``dataclasses.replace``, only faster."""

from __future__ import annotations

import dataclasses

import pytest

from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef


def _execution() -> Execution:
    return Execution("e1", WorkflowRef("w", 2, "hash", ""), 7, '{"n": 1}', 3, worker="w1", gpu_indices=(0, 1))


def test_evolve_gives_what_replace_gives_and_leaves_the_original_be() -> None:
    original = _execution()
    for changes in (
        {},
        {"state": State.RUNNING, "updated_at": 5.0},
        {"state": State.FAILED, "error": ExecutionError("E", "m"), "worker": "", "generation": 4},
        {field.name: getattr(original, field.name) for field in dataclasses.fields(Execution)},
    ):
        evolved = original.evolve(**changes)
        assert evolved == dataclasses.replace(original, **changes)  # type: ignore[arg-type]
        assert evolved is not original
    assert original == _execution()
    with pytest.raises(dataclasses.FrozenInstanceError):
        original.evolve().state = State.CANCELLED  # type: ignore[misc]


def test_evolve_refuses_a_field_the_record_does_not_have() -> None:
    with pytest.raises(TypeError, match="no field 'stat'"):
        _execution().evolve(stat=State.RUNNING)
