"""The shared harness of the dispatcher's unit tests: the dispatcher (DESIGN §3-§4) over an
in-memory store, fake worker sessions and a hand-driven clock.

No processes, no network, no sleeping: ``Flux.start`` stops the housekeeping task and
tests run its step, ``housekeeping.expire``, themselves after moving the clock. The
``flux`` fixture (a started ``Flux``) is in tests/unit/conftest.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from flux.dispatcher.core import Dispatcher, Settings, WorkerRegistration
from flux.dispatcher.handle import Modes
from flux.dispatcher.state.session import MAX_BUFFERED_EVENTS, Event, Scheduled, Session
from flux.dispatcher.transitions import housekeeping
from flux.domain.execution import Execution, ExecutionError, State
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.domain.workflow import WorkflowRecord
from tests.unit.fleet import GiB, gpus_of
from tests.unit.memory_store import MemoryStore

# Grace shorter than the ack deadline, so a lost worker's unclaimed dispatches
# are recovered by the loss itself, not by their deadline.
SETTINGS = Settings(
    ack_deadline=10.0, grace_period=5.0, safety_tick=3600.0, ping_interval=3600.0, server_id="test"
)
ACK, GRACE = SETTINGS.ack_deadline, SETTINGS.grace_period


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def drain(session: Session | None) -> list[Event]:
    """Everything pushed to the session since the last drain, without blocking."""
    return [] if session is None else session.take(MAX_BUFFERED_EVENTS)


def resources(cpu: int = 4, gpus: int = 0, cpu_available: int | None = None) -> WorkerResources:
    return WorkerResources(
        cpu_total=cpu,
        cpu_available=cpu if cpu_available is None else cpu_available,
        memory_total=16 * GiB,
        memory_available=16 * GiB,
        disk_total=100 * GiB,
        disk_free=100 * GiB,
        gpus=gpus_of(gpus),
    )


@dataclass
class Worker:
    """A fake worker process: its token, its session, and the calls it makes."""

    d: Dispatcher
    name: str
    token: str
    session: Session | None = None

    def connect(self) -> Session:
        self.session = self.d.connect(self.name, self.token)
        return self.session

    def disconnect(self) -> None:
        assert self.session is not None
        self.d.disconnect(self.session)

    def events(self) -> list[Event]:
        return drain(self.session)

    def scheduled(self) -> list[str]:
        return [e.execution.execution_id for e in self.events() if isinstance(e, Scheduled)]

    def generation(self, execution_id: str) -> int:
        return self.d.table.unfinished[execution_id].generation

    def claim(self, execution_id: str, generation: int | None = None) -> Execution:
        gen = self.generation(execution_id) if generation is None else generation
        return self.d.claim(self.name, self.token, execution_id, gen)

    async def complete(
        self,
        execution_id: str,
        output_json: str | None = "null",
        error: ExecutionError | None = None,
        generation: int | None = None,
    ) -> Execution:
        gen = self.generation(execution_id) if generation is None else generation
        return await self.d.complete(self.name, self.token, execution_id, gen, output_json, error)

    def release(self, execution_id: str, generation: int | None = None) -> Execution:
        gen = self.generation(execution_id) if generation is None else generation
        return self.d.release(self.name, self.token, execution_id, gen, "test")

    def report(self, res: WorkerResources, draining: bool = False) -> None:
        self.d.report(self.name, self.token, res, None, draining)


class Flux:
    def __init__(
        self, store: MemoryStore | None = None, clock: Clock | None = None, modes: Modes | None = None
    ) -> None:
        self.store = store or MemoryStore()
        self.clock = clock or Clock()
        self.d = Dispatcher(self.store, SETTINGS, clock=self.clock, modes=modes)

    async def start(self) -> Flux:
        await self.d.start()
        assert self.d.housekeeper.task is not None
        self.d.housekeeper.task.cancel()  # the tests run housekeeping themselves
        return self

    async def workflow(
        self,
        name: str = "job",
        *,
        max_attempts: int = 3,
        affinity: dict[str, str] | None = None,
        **requests: int,
    ) -> WorkflowRecord:
        declared = WorkflowRecord(
            name, 0, "", "main", ResourceRequest(**requests), affinity or {}, max_attempts
        )
        [record] = await self.d.register_workflows(f"{name}.py", f"# {name}\n", [declared])
        return record

    async def worker(
        self,
        name: str = "w1",
        cpu: int = 4,
        *,
        gpus: int = 0,
        cpu_available: int | None = None,
        labels: dict[str, str] | None = None,
        capacity: int = 0,
        connect: bool = True,
    ) -> Worker:
        registration = WorkerRegistration(
            name, resources(cpu, gpus, cpu_available), WorkerSoftware(), labels or {}, capacity
        )
        worker = Worker(self.d, name, await self.d.register_worker(registration))
        if connect:
            worker.connect()
        return worker

    async def run(self, workflow: str = "job", input_json: str = "") -> str:
        return (await self.d.submit(workflow, input_json)).execution_id

    def get(self, execution_id: str) -> Execution:
        return self.d.table.unfinished.get(execution_id) or self.d.table.finished[execution_id]

    def state(self, execution_id: str) -> State:
        return self.get(execution_id).state

    def expire(self, advance: float = 0.0) -> bool:
        return housekeeping.expire(self.d, self.clock.advance(advance))

    async def tick(self) -> None:
        """One housekeeping tick a safety tick later, and the writes it starts, landed or failed."""
        self.d.housekeeper.tick(self.clock.advance(SETTINGS.safety_tick))
        await settled()

    def holdings(self, name: str) -> set[str]:
        return set(self.d.registry.entries[name].holdings)


async def committed() -> None:
    """Let the store's pending batch commit (it commits on the next loop iteration)."""
    await asyncio.sleep(0)


async def settled() -> None:
    """Let the store's pending batch commit or fail, and the callbacks on its outcome run
    (each caller's wait is its own future, one loop step behind the batch: Store.save)."""
    for _ in range(5):
        await asyncio.sleep(0)
