"""How a worker talks to the control plane, independent of the wire.

The runtime speaks only in these domain terms; ``GrpcTransport`` (here) and
the SSE transport (through the gateway) translate them. Every error a
transport raises is a ``flux.errors.FluxError``: ``Unavailable`` for "try
again later", the others for refusals.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from flux.domain.execution import ExecutionError, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources, WorkerSoftware


@dataclass(frozen=True, slots=True)
class Registration:
    name: str
    resources: WorkerResources
    software: WorkerSoftware
    labels: dict[str, str]
    capacity: int
    session_token: str = ""


@dataclass(frozen=True, slots=True)
class Connected:
    server_id: str
    # What the server believes this worker holds: execution id -> generation (0 when an older
    # server sent only the ids, so the worker can abandon the rest but release none of them).
    held: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Dispatch:
    execution_id: str
    attempt: int
    generation: int
    input_json: str
    workflow: WorkflowRef
    gpu_indices: tuple[int, ...]
    requests: ResourceRequest


@dataclass(frozen=True, slots=True)
class Cancel:
    execution_id: str
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


WorkerEvent = Connected | Dispatch | Cancel | Heartbeat


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

    @abc.abstractmethod
    async def release(
        self, name: str, token: str, execution_id: str, generation: int, reason: str
    ) -> None: ...

    @abc.abstractmethod
    async def get_source(self, name: str, token: str, source_hash: str) -> tuple[str, str]:
        """(filename, source) of a registered workflow file."""

    @abc.abstractmethod
    async def close(self) -> None: ...
