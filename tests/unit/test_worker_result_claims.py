"""A result refused because its execution is not claimed (yet) claims and is sent once more.

Seen in a fresh-clone CI run (test_server_killed_under_submissions_loses_nothing_and_records_once,
SSE, PostgreSQL): the server was killed as a body ended; on the restarted server the worker's
claim came before the server held its stream, its result was refused as "SCHEDULED; claim it
before completing" and dropped, then a claim went through, and the execution stayed RUNNING with
nobody to finish it. A fake transport answers as that server did; the worker is the real one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from flux.domain.execution import WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.errors import FailedPrecondition, FluxError
from flux.worker.probe import ResourceProbe
from flux.worker.runtime import WorkerConfig, WorkerRuntime
from flux.worker.transport import Dispatch, Outcome

pytestmark = pytest.mark.timeout(10)

UNCLAIMED = FailedPrecondition("execution e1 is SCHEDULED; claim it before completing")
STALE = FailedPrecondition("stale generation 3 for execution e1")


class _Transport:
    """Answers each call with the next answer in its list, recording what was sent."""

    def __init__(self, results: list[FluxError | None], claims: list[FluxError | None]):
        self.results, self.claims = results, claims
        self.calls: list[str] = []

    async def complete_batch(
        self, name: str, token: str, items: Sequence[Outcome], resources: object
    ) -> list[FluxError | None]:
        self.calls += [f"complete {o.execution_id}" for o in items]
        return [self.results.pop(0) for _ in items]

    async def claim_batch(
        self, name: str, token: str, items: Sequence[tuple[str, int]], on_written: Callable[[], None]
    ) -> list[FluxError | None]:
        on_written()
        self.calls += [f"claim {execution_id}" for execution_id, _ in items]
        return [self.claims.pop(0) for _ in items]


def _worker(transport: _Transport, tmp_path: Path) -> WorkerRuntime:
    config = WorkerConfig(name="w1", labels={}, capacity=1, work_dir=tmp_path)
    return WorkerRuntime(config, transport, ResourceProbe(gpu_readers=[]))  # type: ignore[arg-type]


def _dispatch() -> Dispatch:
    return Dispatch("e1", 1, 2, "null", WorkflowRef("w", 1, "hash", "w"), (), ResourceRequest())


async def test_a_result_refused_as_unclaimed_claims_and_is_delivered(tmp_path: Path) -> None:
    transport = _Transport(results=[UNCLAIMED, None], claims=[None])
    assert await _worker(transport, tmp_path)._deliver(_dispatch(), "1", None)
    assert transport.calls == ["complete e1", "claim e1", "complete e1"]


async def test_a_claim_refused_too_means_it_was_never_ours(tmp_path: Path) -> None:
    transport = _Transport(results=[UNCLAIMED], claims=[STALE])
    assert not await _worker(transport, tmp_path)._deliver(_dispatch(), "1", None)
    assert transport.calls == ["complete e1", "claim e1"]


async def test_it_claims_once_not_in_a_loop(tmp_path: Path) -> None:
    # Claimed, and refused again (it timed out meanwhile, say): given up, not claimed forever.
    transport = _Transport(results=[UNCLAIMED, STALE], claims=[None])
    assert not await _worker(transport, tmp_path)._deliver(_dispatch(), "1", None)
    assert transport.calls == ["complete e1", "claim e1", "complete e1"]
