"""A stopped execution's Release is tried again when it does not get through.

The bench of timers found a burst of 2,000 stops at once answered partly CANCELLED by grpc
itself; a worker that gave up then left the room held until the server's stop grace ran out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.errors import FailedPrecondition, Unavailable
from flux.worker import runtime
from flux.worker.probe import ResourceProbe
from flux.worker.runtime import WorkerConfig, WorkerRuntime

pytestmark = pytest.mark.timeout(10)


class _Transport:
    def __init__(self, failures: list[Exception]):
        self.failures = failures
        self.calls: list[tuple[str, int, str]] = []

    async def release(self, name: str, token: str, execution_id: str, generation: int, reason: str) -> None:
        self.calls.append((execution_id, generation, reason))
        if self.failures:
            raise self.failures.pop(0)


def _runtime(transport: _Transport, tmp_path: Path) -> WorkerRuntime:
    config = WorkerConfig(name="w1", labels={}, capacity=1, work_dir=tmp_path)
    return WorkerRuntime(config, transport, ResourceProbe(gpu_readers=[]))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "RELEASE_RETRY_FIRST", 0.0)
    monkeypatch.setattr(runtime, "RELEASE_RETRY_MAX", 0.0)


async def test_a_release_that_did_not_get_through_is_tried_again(tmp_path: Path) -> None:
    transport = _Transport([Unavailable("CANCELLED"), Unavailable("CANCELLED")])
    await _runtime(transport, tmp_path)._release("e1", 3, "timeout")
    assert transport.calls == [("e1", 3, "timeout")] * 3


async def test_a_refused_release_is_not_repeated(tmp_path: Path) -> None:
    transport = _Transport([FailedPrecondition("stale generation")])
    await _runtime(transport, tmp_path)._release("e1", 3, "timeout")
    assert len(transport.calls) == 1


async def test_tries_are_bounded(tmp_path: Path) -> None:
    transport = _Transport([Unavailable("down")] * 100)
    await _runtime(transport, tmp_path)._release("e1", 3, "timeout")
    assert len(transport.calls) == runtime.RELEASE_TRIES
