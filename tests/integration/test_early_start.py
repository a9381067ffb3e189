"""A worker starts the body with its claim, and sends the result right behind the claim.

The worker runs in this process over a transport that watches (and holds) its calls; the
server, gateway and store are the real ones of the cluster fixture.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from flux.errors import Unavailable
from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2
from flux.worker import executions
from flux.worker.grpc_transport import GrpcTransport
from flux.worker.sse_transport import SseTransport
from tests.integration.test_batches import in_process_worker, transport_for

pytestmark = pytest.mark.timeout(120)

COMPLETED = control_pb2.ExecutionState.Value("EXECUTION_STATE_COMPLETED")
SCHEDULED = control_pb2.ExecutionState.Value("EXECUTION_STATE_SCHEDULED")
CREATED = control_pb2.ExecutionState.Value("EXECUTION_STATE_CREATED")
RUNNING = control_pb2.ExecutionState.Value("EXECUTION_STATE_RUNNING")
CANCELLED = control_pb2.ExecutionState.Value("EXECUTION_STATE_CANCELLED")
# How long the cancel test holds a claim back: longer than a cancel takes to arrive, short to wait out.
HELD_FOR = 4.0
# A body this long is claimed while it runs (flux.worker.executions.CLAIM_DELAY is far shorter).
PAST_CLAIM_DELAY = 0.3
# How long a claim's answer is held back for a result to overtake it: a bound, so a worker that
# waits for the answer (the behaviour under test's opposite) fails the order below, not the run.
HOLD = 10.0


class HeldClaimAnswers(GrpcTransport):
    """Holds each claim's answer until a result has been sent, and notes the order of the calls."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.order: list[str] = []
        self.holding = False  # from the second run: the first shows the server serves the stream
        self._result_sent: asyncio.Event | None = None

    def _sent(self) -> asyncio.Event:
        if self._result_sent is None:  # made on the worker's loop, which is not the test's
            self._result_sent = asyncio.Event()
        return self._result_sent

    async def claim_batch(self, name: str, token: str, items: Sequence[Any], **kwargs: Any) -> Any:
        if not self.holding:
            return await super().claim_batch(name, token, items, **kwargs)
        on_written = kwargs.pop("on_written", None)

        def written() -> None:
            self.order.append("claim written")
            on_written()

        # Passed on only where the transport gives one (a stream the server serves): the order
        # below then shows it missing rather than hiding it.
        kwargs["on_written"] = written if on_written is not None else None
        answers = await super().claim_batch(name, token, items, **kwargs)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._sent().wait(), HOLD)
        self.order.append("claim answered")
        return answers

    async def complete_batch(self, name: str, token: str, items: Sequence[Any], resources: Any) -> Any:
        if self.holding:
            self.order.append("result sent")
            self._sent().set()
        return await super().complete_batch(name, token, items, resources)


@pytest.mark.transports("grpc")
def test_a_result_follows_its_claim_on_the_stream_without_waiting_for_the_claims_answer(
    cluster: Cluster,
) -> None:
    transport = HeldClaimAnswers([cluster.address], cluster.credentials(Role.WORKER))
    with in_process_worker(cluster, "eager", transport):
        # Until the server has answered on the stream, nothing is sent ahead of an answer: a
        # server without the stream would never read the claim the result relies on.
        assert cluster.run("echo", 6, timeout=60).state == COMPLETED
        transport.holding = True
        done = cluster.run("sleepy", PAST_CLAIM_DELAY, timeout=60)  # claimed before it ends
    assert transport.order == ["claim written", "result sent", "claim answered"]
    # The server read the claim first: the result was taken, and recorded once.
    assert done.state == COMPLETED
    assert json.loads(done.output_json)["worker"] == "eager"


class FirstResultLost(GrpcTransport):
    """Its first result call fails as if the stream dropped as the result left, and is never sent."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.result_calls = 0

    async def complete_batch(self, name: str, token: str, items: Sequence[Any], resources: Any) -> Any:
        self.result_calls += 1
        if self.result_calls == 1:
            raise Unavailable("the call stream was closed")
        return await super().complete_batch(name, token, items, resources)


@pytest.mark.transports("grpc")
def test_a_result_sent_behind_its_claim_and_lost_is_delivered_again_once_the_claim_is_answered(
    cluster: Cluster,
) -> None:
    transport = FirstResultLost([cluster.address], cluster.credentials(Role.WORKER))
    with in_process_worker(cluster, "lossy", transport):
        done = cluster.run("sleepy", PAST_CLAIM_DELAY, timeout=60)  # claimed before it ends
    # The try behind the claim was lost; the worker waited for the claim and delivered again.
    assert transport.result_calls == 2
    assert done.state == COMPLETED
    assert json.loads(done.output_json)["worker"] == "lossy"


def refusing(base: type[Any]) -> type[Any]:
    """``base`` whose claims name a generation the server never dispatched, so each is refused as stale.

    The server sends no cancel for such a claim (the dispatch is still the worker's): only the
    refusal can stop the body that started with it.
    """

    class Refusing(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.refused: list[str] = []
            self.completions = 0

        async def claim_batch(self, name: str, token: str, items: Sequence[Any], **kwargs: Any) -> Any:
            answers = await super().claim_batch(name, token, [(i, g + 1000) for i, g in items], **kwargs)
            self.refused += [str(answer) for answer in answers if answer is not None]
            return answers

        async def complete_batch(self, *args: Any) -> Any:
            self.completions += 1
            return await super().complete_batch(*args)

    return Refusing


@pytest.mark.parametrize("body", ["async", "sync"])
def test_a_refused_claim_stops_the_body_that_started_with_it(cluster: Cluster, body: str) -> None:
    credentials = cluster.credentials(Role.WORKER)
    if cluster.transport == "sse":
        transport = refusing(SseTransport)([cluster.gateway_url], credentials=credentials)
    else:
        transport = refusing(GrpcTransport)([cluster.address], credentials)
    with in_process_worker(cluster, "refused", transport) as runtime:
        if body == "async":
            started = cluster.run("sleepy", 60.0, wait=False)  # sleeps a minute unless stopped
        else:
            started = cluster.run("blocking", 8.0, wait=False)  # a thread nothing can stop
        eventually(lambda: transport.refused, what="the claim refused")
        assert "stale generation" in transport.refused[0]
        # The body started with the claim; the refusal stopped it (a thread: stopped waiting for
        # it) long before it was done.
        eventually(lambda: not runtime._running, timeout=5, what="the body stopped")
        assert transport.completions == 0  # and nothing was sent for it
        # Never claimed, never finished: the server holds the dispatch until the ack deadline
        # takes it back (CREATED), as for any dispatch a worker did not claim, then dispatches again.
        assert cluster.client.get(started.execution_id).state in (SCHEDULED, CREATED)


@pytest.fixture
def slow_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims held back far longer than any body here runs: each result must carry its claim."""
    monkeypatch.setattr(executions, "CLAIM_DELAY", 60.0)


@pytest.mark.transports("grpc")
def test_a_body_that_ends_before_its_claim_is_due_sends_the_claim_inside_its_result(
    cluster: Cluster, slow_claims: None
) -> None:
    transport = transport_for(cluster)
    with in_process_worker(cluster, "brief", transport):
        done = [cluster.run("echo", i, timeout=60) for i in range(3)]
    assert [e.state for e in done] == [COMPLETED] * 3
    assert [json.loads(e.output_json) for e in done] == [{"input": i, "worker": "brief"} for i in range(3)]
    # One call per execution: no claim of its own, the claim inside each result.
    calls = transport.calls
    assert (calls["claim"], calls["claim_batch"]) == (0, 0)
    assert calls["claimed with results"] == calls["completed in batches"] == 3


@pytest.mark.transports("grpc")
def test_a_body_that_outlasts_the_claim_delay_is_claimed_while_it_runs(cluster: Cluster) -> None:
    transport = transport_for(cluster)
    with in_process_worker(cluster, "patient", transport):
        started = cluster.run("sleepy", 3.0, wait=False)
        # Shown RUNNING long before the body ends: the claim went on its own once it was due.
        eventually(
            lambda: cluster.client.get(started.execution_id).state == RUNNING, timeout=2.5, what="RUNNING"
        )
        done = cluster.client.wait(started.execution_id, timeout=60)
    assert done.state == COMPLETED
    assert (transport.calls["claimed in batches"], transport.calls["claimed with results"]) == (1, 0)


class ClaimDropped(GrpcTransport):
    """Drops the claim from each result it sends, as a server or proxy that takes none there would."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.result_calls = self.claim_calls = 0

    async def claim_batch(self, name: str, token: str, items: Sequence[Any], **kwargs: Any) -> Any:
        self.claim_calls += 1
        return await super().claim_batch(name, token, items, **kwargs)

    async def complete_batch(self, name: str, token: str, items: Sequence[Any], resources: Any) -> Any:
        self.result_calls += 1
        return await super().complete_batch(name, token, [replace(i, claim=False) for i in items], resources)


@pytest.mark.transports("grpc")
def test_a_result_whose_claim_was_dropped_on_the_way_claims_on_its_own_and_is_recorded(
    cluster: Cluster, slow_claims: None
) -> None:
    transport = ClaimDropped([cluster.address], cluster.credentials(Role.WORKER))
    with in_process_worker(cluster, "dropped", transport):
        done = cluster.run("echo", 5, timeout=60)
    # Refused ("claim it before completing"), then claimed on its own and delivered again.
    assert (transport.result_calls, transport.claim_calls) == (2, 1)
    assert done.state == COMPLETED
    assert json.loads(done.output_json) == {"input": 5, "worker": "dropped"}


class StaleEverywhere(GrpcTransport):
    """Quotes a generation the server never dispatched in every claim and result: each is refused."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.results: list[Any] = []
        self.claims = 0

    async def claim_batch(self, name: str, token: str, items: Sequence[Any], **kwargs: Any) -> Any:
        self.claims += 1
        return await super().claim_batch(name, token, [(i, g + 1000) for i, g in items], **kwargs)

    async def complete_batch(self, name: str, token: str, items: Sequence[Any], resources: Any) -> Any:
        self.results += items
        stale = [replace(i, generation=i.generation + 1000) for i in items]
        return await super().complete_batch(name, token, stale, resources)


@pytest.mark.transports("grpc")
def test_a_result_refused_with_its_claim_and_then_its_claim_alone_is_dropped(
    cluster: Cluster, slow_claims: None
) -> None:
    transport = StaleEverywhere([cluster.address], cluster.credentials(Role.WORKER))
    with in_process_worker(cluster, "stale", transport) as runtime:
        started = cluster.run("echo", 1, wait=False)
        eventually(
            lambda: transport.claims == 1 and not runtime._running, what="the claim on its own refused"
        )
        # One result carrying its claim, one claim on its own; both refused, and nothing after them.
        assert [item.claim for item in transport.results] == [True]
        assert cluster.client.get(started.execution_id).state in (SCHEDULED, CREATED)


@pytest.mark.transports("grpc")
def test_an_execution_cancelled_before_its_claim_was_due_sends_neither_claim_nor_result(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executions, "CLAIM_DELAY", HELD_FOR)
    transport = transport_for(cluster)
    with in_process_worker(cluster, "held", transport) as runtime:
        started = cluster.run("sleepy", 60.0, wait=False)
        eventually(lambda: bool(runtime._running), what="the body running, its claim held back")
        body_seen = time.monotonic()
        cluster.client.cancel(started.execution_id)
        eventually(lambda: not runtime._running, timeout=5, what="the body stopped")
        assert cluster.client.get(started.execution_id).state == CANCELLED
        # Past the time the claim would have been due: the stop took its timer with it.
        time.sleep(max(0.0, body_seen + HELD_FOR + 0.5 - time.monotonic()))
    calls = transport.calls
    assert (calls["claim_batch"], calls["claim"], calls["complete_batch"], calls["complete"]) == (0, 0, 0, 0)
