"""How a worker talks to the control plane, independent of the wire.

The runtime speaks only in these domain terms; ``GrpcTransport`` (here) and
the SSE transport (through the gateway) translate them. Every error a
transport raises is a ``flux.errors.FluxError``: ``Unavailable`` for "try
again later", the others for refusals.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass

from flux.domain.execution import ExecutionError, WorkflowRef
from flux.domain.gang import GangInfo
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.errors import FluxError, Unavailable, Unimplemented, from_code_name


@dataclass(frozen=True, slots=True)
class Registration:
    name: str
    resources: WorkerResources
    software: WorkerSoftware
    labels: dict[str, str]
    capacity: int
    session_token: str = ""
    # Where gang members reach this worker (--advertise-address); "" lets the server use the
    # address it sees the worker connect from.
    advertise_address: str = ""
    # Executions it may hold beyond its room in its own queue (--prefetch).
    prefetch: int = 0


@dataclass(frozen=True, slots=True)
class Connected:
    server_id: str
    # What the server believes this worker holds: execution id -> generation (0 when an older
    # server sent only the ids, so the worker can abandon the rest but release none of them).
    held: Mapping[str, int]
    # The server takes a claim inside a result: a body that ends before its claim is due sends one call.
    claims_with_results: bool = False


@dataclass(frozen=True, slots=True)
class Dispatch:
    execution_id: str
    attempt: int
    generation: int
    input_json: str
    workflow: WorkflowRef
    gpu_indices: tuple[int, ...]
    requests: ResourceRequest
    # The dispatch's trace context (flux/observe/tracing.py carrier); "" when not traced.
    trace: str = ""
    # The attempt's time limit in seconds (0: none): a sync body with one runs in a child process,
    # which can be killed when the server stops the attempt.
    timeout: float = 0.0
    # Send the latest heartbeat at least this often while the body runs (0: only when it calls one).
    heartbeat_interval: float = 0.0
    # The details of the latest heartbeat of an earlier attempt, JSON ("" for none).
    last_heartbeat_json: str = ""
    # A gang member's rank and every member (ctx.gang); None for an ordinary execution.
    gang: GangInfo | None = None
    # Queued ahead: nothing is reserved yet; start it (claiming it) only when this worker's room allows.
    queued: bool = False
    # Higher first in this worker's own queue; first come first within a priority.
    priority: int = 0
    # Its dependencies' outputs, (execution id, output JSON) (ctx.upstream).
    upstream: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Cancel:
    execution_id: str
    generation: int
    reason: str
    # Preempted: stop and hand it back (Release), it goes back in line; not a final state.
    preempted: bool = False


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


@dataclass(frozen=True, slots=True)
class Outcome:
    """One execution's result, as a CompleteBatch item carries it."""

    execution_id: str
    generation: int
    output_json: str | None
    error: ExecutionError | None
    # Claims the execution too (Connected.claims_with_results): its claim was never sent.
    claim: bool = False


WorkerEvent = Connected | Dispatch | Cancel | Heartbeat

# Per item of a batched call: None when accepted, else the refusal its single call would have raised.
Answers = list[FluxError | None]


def answers_from(count: int, answers: Sequence[tuple[bool, str, str]]) -> Answers:
    """(ok, status name, message) per item, as the wire carries them, for ``count`` items sent.

    An item the server left unanswered is retried (Unavailable), never taken as accepted.
    """
    decoded: Answers = [None if ok else from_code_name(code, message) for ok, code, message in answers]
    missing = Unavailable("the server answered fewer items than the batch carried; retry")
    return decoded[:count] + [missing] * (count - len(decoded))


class WorkerTransport(abc.ABC):
    name: str = "grpc"

    @abc.abstractmethod
    async def register(self, registration: Registration) -> str:
        """Returns the session token."""

    @abc.abstractmethod
    def connect(self, name: str, session_token: str) -> AsyncIterator[WorkerEvent]:
        """The dispatch stream; the first event is Connected. Ends when the server closes it."""

    @abc.abstractmethod
    async def report(
        self,
        name: str,
        token: str,
        resources: WorkerResources,
        software: WorkerSoftware | None,
        draining: bool,
    ) -> None: ...

    @abc.abstractmethod
    async def claim(self, name: str, token: str, execution_id: str, generation: int) -> None: ...

    @abc.abstractmethod
    async def complete(
        self,
        name: str,
        token: str,
        execution_id: str,
        generation: int,
        output_json: str | None,
        error: ExecutionError | None,
        resources: WorkerResources | None,
    ) -> None: ...

    async def claim_batch(
        self,
        name: str,
        token: str,
        items: Sequence[tuple[str, int]],
        on_written: Callable[[], None] | None = None,
    ) -> Answers:
        """Claims (execution id, generation) items in one call; Unimplemented where the server lacks it.

        ``on_written`` is called once the claims are on a stream the server reads in order, so
        that a call made after it is read after them; never where calls are not ordered so.
        """
        raise Unimplemented(f"the {self.name} transport has no batched claims")

    async def complete_batch(
        self, name: str, token: str, items: Sequence[Outcome], resources: WorkerResources | None
    ) -> Answers:
        """Sends results in one call; Unimplemented where the server lacks it."""
        raise Unimplemented(f"the {self.name} transport has no batched completes")

    @abc.abstractmethod
    async def release(
        self, name: str, token: str, execution_id: str, generation: int, reason: str
    ) -> None: ...

    async def heartbeat(
        self, name: str, token: str, execution_id: str, generation: int, details_json: str
    ) -> None:
        """Say a running execution is alive; Unimplemented where the server lacks it."""
        raise Unimplemented(f"the {self.name} transport has no heartbeats")

    @abc.abstractmethod
    async def get_source(self, name: str, token: str, source_hash: str) -> tuple[str, str]:
        """(filename, source) of a registered workflow file."""

    @abc.abstractmethod
    async def close(self) -> None: ...
