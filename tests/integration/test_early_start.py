"""A worker starts the body with its claim, and sends the result right behind the claim.

The worker runs in this process over a transport that watches (and holds) its calls; the
server, gateway and store are the real ones of the cluster fixture.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any

import pytest

from flux.auth import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2
from flux.worker.grpc_transport import GrpcTransport
from flux.worker.sse_transport import SseTransport
from tests.integration.test_batches import in_process_worker

pytestmark = pytest.mark.timeout(120)

COMPLETED = control_pb2.ExecutionState.Value("EXECUTION_STATE_COMPLETED")
CANCELLED = control_pb2.ExecutionState.Value("EXECUTION_STATE_CANCELLED")
# How long a claim's answer is held back for a result to overtake it: a bound, so a worker that
# waits for the answer (the behaviour under test's opposite) fails the order below, not the run.
HOLD = 10.0


class HeldClaimAnswers(GrpcTransport):
    """Holds each claim's answer until a result has been sent, and notes the order of the calls."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.order: list[str] = []
        self._result_sent: asyncio.Event | None = None

    def _sent(self) -> asyncio.Event:
        if self._result_sent is None:  # made on the worker's loop, which is not the test's
            self._result_sent = asyncio.Event()
        return self._result_sent

    async def claim_batch(self, name: str, token: str, items: Sequence[Any], **kwargs: Any) -> Any:
        on_written = kwargs.pop("on_written", None)

        def written() -> None:
            self.order.append("claim written")
            if on_written is not None:
                on_written()

        answers = await super().claim_batch(name, token, items, on_written=written, **kwargs)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._sent().wait(), HOLD)
        self.order.append("claim answered")
        return answers

    async def complete_batch(self, name: str, token: str, items: Sequence[Any], resources: Any) -> Any:
        self.order.append("result sent")
        self._sent().set()
        return await super().complete_batch(name, token, items, resources)


@pytest.mark.transports("grpc")
def test_a_result_follows_its_claim_on_the_stream_without_waiting_for_the_claims_answer(
    cluster: Cluster,
) -> None:
    transport = HeldClaimAnswers([cluster.address], cluster.credentials(Role.WORKER))
    with in_process_worker(cluster, "eager", transport):
        done = cluster.run("echo", 7, timeout=60)
    assert transport.order == ["claim written", "result sent", "claim answered"]
    # The server read the claim first: the result was taken, and recorded once.
    assert done.state == COMPLETED
    assert json.loads(done.output_json) == {"input": 7, "worker": "eager"}


def refusing(base: type[Any]) -> type[Any]:
    """``base`` that cancels each execution just before claiming it, so the server refuses the claim."""

    class Refusing(base):  # type: ignore[valid-type, misc]
        def __init__(self, cluster: Cluster, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.cluster = cluster
            self.completions = 0

        async def claim_batch(self, name: str, token: str, items: Sequence[Any], **kwargs: Any) -> Any:
            for execution_id, _ in items:
                await asyncio.to_thread(self.cluster.client.cancel, execution_id)
            return await super().claim_batch(name, token, items, **kwargs)

        async def complete_batch(self, *args: Any) -> Any:
            self.completions += 1
            return await super().complete_batch(*args)

    return Refusing


def test_a_refused_claim_stops_the_body_that_started_with_it(cluster: Cluster) -> None:
    credentials = cluster.credentials(Role.WORKER)
    if cluster.transport == "sse":
        transport = refusing(SseTransport)(cluster, [cluster.gateway_url], credentials=credentials)
    else:
        transport = refusing(GrpcTransport)(cluster, [cluster.address], credentials)
    with in_process_worker(cluster, "refused", transport) as runtime:
        started = cluster.run("sleepy", 60.0, wait=False)  # sleeps a minute unless stopped
        eventually(lambda: cluster.client.get(started.execution_id).state == CANCELLED, what="cancelled")
        # The body started with the claim; the refusal stopped it long before its minute was up.
        eventually(lambda: not runtime._running, timeout=20, what="the body stopped")
        assert transport.completions == 0  # and nothing was sent for it
    assert cluster.client.get(started.execution_id).state == CANCELLED
