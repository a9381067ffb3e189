"""The dispatcher: the async shell around the pure matcher.

Every change that can make room or add work runs a *scoped* scheduling pass
right away, inside the same event-loop step, so there is nothing to race:

- a submission tests only its own shape, against every worker;
- a worker that connects, reports, or frees space is the only worker where
  something new can fit, so only it is tested, against every shape;
- a slow safety tick runs a full pass for anything missed.

That keeps the invariant "after each pass, no pending execution fits any
worker", which is what makes scoped passes complete. A pass is: snapshot
views → ``schedule`` (pure) → commit (reserve, bump the fencing generation,
queue the store write) → push to the worker's stream.

This class is the whole dispatcher for one server on SQLite. With PostgreSQL,
``ReplicaDispatcher`` (replica.py) overrides the few steps where replicas must
agree: it claims a placement in the database before pushing it (``_dispatch``),
and reads executions that another replica holds from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import heapq
import hmac
import json
import logging
import re
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from flux.dispatcher.listing import needs_live_state
from flux.dispatcher.session import Cancelled, Ping, Scheduled, Session
from flux.dispatcher.unfinished import Unfinished
from flux.dispatcher.workers import WorkerEntry
from flux.domain.execution import Execution, ExecutionError, State, WorkflowRef
from flux.domain.labels import validate_labels
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from flux.matching import (
    DEFAULT_CAPACITY,
    DEFAULT_STARVATION_AFTER,
    Aging,
    Explanation,
    FeasibilityCache,
    PendingQueue,
    Placement,
    Shape,
    explain,
    schedule,
)
from flux.observe.lifecycle import Lifecycle, Requeue
from flux.store.base import Conflict, ExecutionQuery, Store, WorkerIdentity, WorkflowRecord
from flux.workflow import validate_name, validate_priority

log = logging.getLogger("flux.dispatcher")

# Checked with fullmatch: "$" also matches before a final newline, so "w1\n" would pass re.match.
WORKER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
SOURCE_HASH = re.compile(r"[0-9a-f]{64}")
WORKER_NAME_FORM = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
MAX_CAPACITY = 4096
MAX_ID_LENGTH = 128
# Size limits: each refusal names the limit it hit.
MAX_SOURCE_BYTES = 4 * 1024 * 1024
MAX_JSON_BYTES = 4 * 1024 * 1024
MAX_WORKER_PACKAGES = 20_000
MAX_MARKERS = 64
MAX_RUNTIMES = 16
MAX_TEXT = 256
RUNTIME_NAME = re.compile(r"[a-z][a-z0-9_.+-]{0,31}")
RUNTIME_FORM = "1-32 lowercase letters, digits, '_', '.', '+' or '-', starting with a letter, e.g. python"
# Rows a listing reads from the store per round while it filters them against live state.
LISTING_BATCH = 500
KiB, MiB, GiB = 1024, 1024**2, 1024**3


@dataclass(frozen=True, slots=True)
class Settings:
    ack_deadline: float = 10.0
    grace_period: float = 30.0
    safety_tick: float = 5.0
    ping_interval: float = 15.0
    finished_cache: int = 10_000
    # Payload bytes (inputs, outputs, errors) the finished cache may keep; older entries are
    # dropped past it and read back from the store when asked for.
    finished_cache_bytes: int = 16 * MiB
    server_id: str = ""
    # Inputs up to this size stay in RAM while pending (a dispatch needs no store read);
    # larger ones stay only in the store and load when dispatched.
    inline_input_bytes: int = 16 * KiB
    # Admission: past either limit a submission is refused with RESOURCE_EXHAUSTED.
    max_pending: int = 500_000
    max_pending_bytes: int = 2 * GiB
    max_workers: int = 10_000
    # Labels, packages, markers and GPU names one worker may advertise, in bytes.
    max_worker_metadata: int = 256 * KiB
    # Aging (--starvation-after): seconds the oldest execution of a shape waits before it is
    # nominated a worker; 0 turns aging off.
    starvation_after: float = DEFAULT_STARVATION_AFTER


@dataclass(frozen=True, slots=True)
class WorkerRegistration:
    name: str
    resources: WorkerResources
    software: WorkerSoftware
    labels: Mapping[str, str]
    capacity: int = 0
    session_token: str = ""
    transport: str = "grpc"


@dataclass(frozen=True, slots=True)
class Why:
    """Answer to "why is this execution where it is?"."""

    execution: Execution
    summary: str
    explanation: Explanation | None = None
    queue_position: int | None = None


class Dispatcher:
    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        events: Lifecycle | None = None,
    ):
        self.store = store
        self.events = events if events is not None else Lifecycle(clock)
        self.settings = settings or Settings(server_id=uuid.uuid4().hex[:12])
        self.clock = clock
        self._workflows: dict[tuple[str, int], WorkflowRecord] = {}
        self._latest: dict[str, int] = {}
        self._shapes: dict[tuple[str, int], Shape] = {}
        self._executions = Unfinished()
        self._finished: OrderedDict[str, Execution] = OrderedDict()
        self._finished_bytes = 0
        # Finished in memory, final state not committed yet: callers still see this (previous) state.
        self._committing: dict[str, Execution] = {}
        self._workers: dict[str, WorkerEntry] = {}
        self._queue = PendingQueue()
        self._cache = FeasibilityCache()
        self._aging = Aging(self.settings.starvation_after)
        self._deadlines: list[tuple[float, str, int]] = []
        self._watchers: dict[str, set[asyncio.Queue[Execution]]] = {}
        self._next_seq = 1
        self._housekeeper: asyncio.Task[None] | None = None
        self._last_full_pass = 0.0

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        recovered = await self.store.open()
        for record in recovered.workflows:
            self._learn_workflow(record)
        self._next_seq = recovered.next_seq
        tokens = {w.name: w.session_token for w in recovered.workers}
        now = self.clock()
        for execution in recovered.unfinished:
            if execution.state is State.RUNNING:
                # Running work waits for its worker's grace period, as if its stream had just dropped.
                entry = self._workers.get(execution.worker)
                if entry is None:
                    entry = self._workers[execution.worker] = WorkerEntry(
                        name=execution.worker,
                        session_token=tokens.get(execution.worker, ""),
                        labels=MappingProxyType({}),
                        capacity=DEFAULT_CAPACITY,
                        resources=WorkerResources(),
                        software=WorkerSoftware(),
                        disconnected_at=now,
                    )
                entry.hold(execution.execution_id, self._record_of(execution).requests, execution.gpu_indices)
                self._executions.add(execution, self.settings.inline_input_bytes)
                continue
            if execution.state is State.SCHEDULED:
                # An unclaimed dispatch from before the restart returns to CREATED
                # (rows from older versions; dispatches are no longer written).
                execution = execution.evolve(state=State.CREATED, worker="", gpu_indices=(), updated_at=now)
                self._save_soon(execution)
            # Dispatches are not written, so one from before the restart may have used
            # generation + 1; skip past it so fencing never sees a generation twice.
            execution = execution.evolve(generation=execution.generation + 1)
            execution = self._executions.add(execution, self.settings.inline_input_bytes)
            self._enqueue(execution, self._shape_of(execution))
        log.info(
            "recovered %d workflows, %d unfinished executions (%d queued)",
            len(self._workflows), len(self._executions), len(self._queue),
        )  # fmt: skip
        self._housekeeper = asyncio.get_running_loop().create_task(self._housekeeping())

    async def serving(self, address: str) -> None:
        """The server is bound to ``address`` (replicas publish it)."""

    async def stop(self) -> None:
        if self._housekeeper is not None:
            self._housekeeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeper
        for entry in self._workers.values():
            if entry.session is not None:
                entry.session.close()
        await self.store.close()

    # ----------------------------------------------------------------- workflows

    async def register_workflows(
        self, filename: str, source: str, workflows: list[WorkflowRecord]
    ) -> list[WorkflowRecord]:
        if not source.strip():
            raise InvalidArgument("source is empty; send the whole Python file that defines the workflows")
        if len(source.encode()) > MAX_SOURCE_BYTES:
            raise ResourceExhausted(
                f"source is larger than the {MAX_SOURCE_BYTES} byte limit for a workflow file"
            )
        if len(filename) > MAX_TEXT:
            raise InvalidArgument(f"filename is longer than {MAX_TEXT} characters")
        if not workflows:
            raise InvalidArgument("workflows is empty; the file must define at least one @workflow")
        seen: set[str] = set()
        for position, wf in enumerate(workflows):
            field = f"workflows[{position}]"
            try:
                validate_name(wf.name, f"{field}.name")
                validate_labels(dict(wf.affinity), f"{field}.affinity")
                validate_priority(wf.priority, f"{field}.priority")
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(str(exc)) from None
            if not RUNTIME_NAME.fullmatch(wf.runtime):
                raise InvalidArgument(
                    f"{field}.runtime {wf.runtime!r} is invalid; a runtime is {RUNTIME_FORM}"
                )
            if not wf.entrypoint.isidentifier():
                raise InvalidArgument(f"{field}.entrypoint {wf.entrypoint!r} is not a Python identifier")
            if not 1 <= wf.max_attempts <= 100:
                raise InvalidArgument(
                    f"{field}.max_attempts must be between 1 and 100; got {wf.max_attempts}"
                )
            if wf.name in seen:
                raise InvalidArgument(f"{field}.name {wf.name!r} appears twice in one file")
            seen.add(wf.name)
        source_hash = hashlib.sha256(source.encode()).hexdigest()
        stored = await self.store.register_workflows(filename, source, source_hash, workflows)
        for record in stored:
            self._learn_workflow(record)
        return stored

    def _learn_workflow(self, record: WorkflowRecord) -> None:
        key = (record.name, record.version)
        self._workflows[key] = record
        self._shapes[key] = Shape(record.requests, record.affinity, record.runtime)
        self._latest[record.name] = max(self._latest.get(record.name, 0), record.version)

    async def get_source(self, source_hash: str) -> tuple[str, str]:
        if not SOURCE_HASH.fullmatch(source_hash):
            raise InvalidArgument(
                f"source_hash must be 64 lowercase hex characters (sha256); got {source_hash!r}"
            )
        found = await self.store.get_source(source_hash)
        if found is None:
            raise NotFound(f"no workflow source with hash {source_hash}")
        return found

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _record_of(self, execution: Execution) -> WorkflowRecord:
        return self._workflows[(execution.workflow.name, execution.workflow.version)]

    def _shape_of(self, execution: Execution) -> Shape:
        return self._shapes[(execution.workflow.name, execution.workflow.version)]

    # ----------------------------------------------------------------- executions

    async def submit(
        self, workflow_name: str, input_json: str = "", version: int = 0, priority: int | None = None
    ) -> Execution:
        if not workflow_name:
            raise InvalidArgument("workflow_name is required: the name of a registered workflow")
        latest = self._latest.get(workflow_name)
        if latest is None:
            raise NotFound(
                f"workflow {workflow_name!r} is not registered{_did_you_mean(workflow_name, self._latest)}; "
                "register its file with 'flux workflow register FILE'"
            )
        if version < 0:
            raise InvalidArgument(f"version must be >= 0 (0 means latest); got {version}")
        record = self._workflows.get((workflow_name, version or latest))
        if record is None:
            raise NotFound(f"workflow {workflow_name!r} has no version {version}; the latest is {latest}")
        input_json = _checked_json(input_json or "null", "input_json")
        rank = record.priority if priority is None else _checked_priority(priority)
        self._admission(len(input_json))
        now = self.clock()
        execution = Execution(
            execution_id=uuid.uuid4().hex,
            workflow=WorkflowRef(record.name, record.version, record.source_hash, record.entrypoint),
            seq=self._take_seq(),
            input_json=input_json,
            max_attempts=record.max_attempts,
            created_at=now,
            updated_at=now,
            priority=rank,
        )
        await self._accept(execution)
        return _with_input(self._executions.get(execution.execution_id, execution), input_json)

    def _admission(self, size: int) -> None:
        """Refuse new work past the pending limits, naming the limit (the store and RAM stay bounded)."""
        s = self.settings
        if len(self._executions) >= s.max_pending:
            raise ResourceExhausted(
                f"{len(self._executions)} executions are unfinished; the limit is {s.max_pending} "
                "(--max-pending); retry when some have finished"
            )
        if self._executions.input_bytes + size > s.max_pending_bytes:
            raise ResourceExhausted(
                f"unfinished executions hold {self._executions.input_bytes} input bytes; this input of "
                f"{size} bytes would pass the limit of {s.max_pending_bytes} (--max-pending-bytes)"
            )

    async def with_input(self, execution: Execution) -> Execution:
        """``execution`` with its input, read from the store when only the store keeps it."""
        if execution.input_json:
            return execution
        stored = await self.store.get_input(execution.execution_id)
        if stored is None:
            log.error("execution %s has no stored input; sending null", execution.execution_id)
        return execution.evolve(input_json=stored or "null")

    async def _accept(self, execution: Execution) -> None:
        """Store a submission (durable before we answer), then queue it."""
        try:
            await self.store.save(execution)
        except Exception as exc:
            raise Unavailable(f"could not store the execution: {exc}") from exc
        self.events.submitted(execution)
        self._admit(execution)

    def _admit(self, execution: Execution) -> None:
        """Queue a stored submission and try to place it right away."""
        self._executions.add(execution, self.settings.inline_input_bytes)
        shape = self._shape_of(execution)
        self._enqueue(execution, shape)
        self._dispatch(shapes=[shape])

    def _enqueue(self, execution: Execution, shape: Shape) -> None:
        """Pending, by priority then submission; aging counts its wait from its submission."""
        self._queue.add(
            execution.execution_id, shape, execution.seq, execution.priority, execution.created_at
        )

    async def get(self, execution_id: str) -> Execution:
        _check_id(execution_id)
        found = self._current(execution_id) or await self.store.get_execution(execution_id)
        if found is None:
            raise NotFound(f"execution {execution_id!r} does not exist")
        return await self.with_input(found)

    async def watch(self, execution_id: str) -> AsyncIterator[Execution]:
        """The current state, then every change, ending after a final state."""
        current = await self.get(execution_id)
        if current.state.finished:
            yield current
            return
        input_json = current.input_json  # read once: an input never changes
        updates: asyncio.Queue[Execution] = asyncio.Queue()
        watchers = self._watchers.setdefault(execution_id, set())
        watchers.add(updates)
        try:
            # Re-read after subscribing: a change between get() and here is not lost.
            current = self._current(execution_id) or current
            yield _with_input(current, input_json)
            while not current.state.finished:
                current = await updates.get()
                yield _with_input(current, input_json)
        finally:
            watchers.discard(updates)
            if not watchers:
                self._watchers.pop(execution_id, None)

    async def cancel(self, execution_id: str) -> Execution:
        _check_id(execution_id)
        execution = self._executions.get(execution_id)
        if execution is None:
            finished = self._finished.get(execution_id) or await self.get(execution_id)
            if finished.state is not State.CANCELLED:
                raise FailedPrecondition(f"execution {execution_id} is already {finished.state.label}")
            # A retried cancel (perhaps its commit failed): store it again, answer the same.
            await self._save_final(finished)
            return finished
        entry = self._workers.get(execution.worker) if execution.worker else None
        if execution.state is State.CREATED:
            self._queue.remove(execution_id)
        elif entry is not None and entry.session is not None:
            entry.session.push(Cancelled(execution_id, execution.generation, "cancelled by a client"))
        final = execution.evolve(state=State.CANCELLED, updated_at=self.clock())
        self._finish(final, entry)
        self.events.finished(final)
        if entry is not None:
            self._dispatch(workers=[entry])
        await self._save_final(final)
        return await self.with_input(final)

    async def why(self, execution_id: str) -> Why:
        execution = self._executions.get(execution_id) or await self.get(execution_id)
        if execution.state is not State.CREATED:
            where = f" on worker {execution.worker}" if execution.worker else ""
            return Why(execution, f"execution is {execution.state.label}{where}")
        # Paused workers are shown, with "is paused" as their reason.
        views = [w.view() for w in self._workers.values() if w.accepting]
        explanation = explain(
            self._shape_of(execution), views, execution_id=execution_id, aging=self._aging, now=self.clock()
        )
        return Why(execution, explanation.summary, explanation, self._queue.position(execution_id))

    # ----------------------------------------------------------------- listings

    async def list_executions(self, query: ExecutionQuery) -> tuple[list[Execution], ExecutionQuery | None]:
        """A page of executions from the store, each as this server knows it now, and the next page's query.

        The store holds every execution (with replicas, those of every replica); the
        dispatcher may know an unfinished one's state and worker a moment before the
        store does, so such rows are read too and matched on their live state.
        """
        live = needs_live_state(query)
        batch = max(query.limit + 1, LISTING_BATCH) if live else query.limit + 1
        found: list[Execution] = []
        after = query.after
        while True:
            rows = await self.store.list_executions(
                ExecutionQuery(
                    batch, query.states, query.workflow, query.worker, query.created_after, after, live
                )
            )
            for row in rows:
                current = self._current(row.execution_id) or row
                if query.matches(current):
                    if len(found) == query.limit:  # one more exists: there is a next page
                        last = found[-1]
                        return found, ExecutionQuery(
                            query.limit, query.states, query.workflow, query.worker, query.created_after,
                            (last.seq, last.execution_id),
                        )  # fmt: skip
                    found.append(current)
            if len(rows) < batch:
                return found, None
            after = (rows[-1].seq, rows[-1].execution_id)

    async def list_workflows(self, name: str = "", version: int = 0) -> list[tuple[WorkflowRecord, int]]:
        """(version, versions of its name): the latest of every name, or every version of ``name``."""
        if version and not name:
            raise InvalidArgument("version needs name: the workflow whose version to show")
        if version < 0:
            raise InvalidArgument(f"version must be >= 0 (0 means every version); got {version}")
        records = await self.store.list_workflows(name)
        if name:
            if not records:
                raise NotFound(
                    f"workflow {name!r} is not registered; 'flux workflow list' shows the registered ones"
                )
            count = len(records)
            if version:
                records = [r for r in records if r.version == version]
                if not records:
                    raise NotFound(
                        f"workflow {name!r} has no version {version}; it has versions 1 to {count}"
                    )
            return [(r, count) for r in records]
        counts: dict[str, int] = {}
        latest: dict[str, WorkflowRecord] = {}
        for record in records:  # by name, then version: the last of a name is its latest
            counts[record.name] = counts.get(record.name, 0) + 1
            latest[record.name] = record
        return [(record, counts[record.name]) for record in latest.values()]

    # ----------------------------------------------------------------- workers

    async def set_paused(self, name: str, paused: bool) -> WorkerEntry:
        """Pause (no new dispatches; its stream and running work stay) or resume a worker."""
        entry = self._workers.get(name)
        if entry is None:
            raise NotFound(f"worker {name!r} is not known; 'flux workers list' shows the fleet")
        self._pause(entry, paused)
        return entry

    def _pause(self, entry: WorkerEntry, paused: bool) -> None:
        if entry.paused == paused:
            return
        entry.paused = paused
        entry.invalidate()
        self.events.worker_paused(entry)
        log.info("worker %s %s", entry.name, "paused" if paused else "resumed")
        if not paused:
            self._dispatch(workers=[entry])

    async def register_worker(self, registration: WorkerRegistration) -> str:
        name = registration.name
        if not WORKER_NAME.fullmatch(name):
            raise InvalidArgument(f"name {name!r} is invalid; a worker name is {WORKER_NAME_FORM}")
        if not 0 <= registration.capacity <= MAX_CAPACITY:
            raise InvalidArgument(
                f"capacity must be between 1 and {MAX_CAPACITY} (0 means {DEFAULT_CAPACITY}); got {registration.capacity}"
            )
        try:
            labels = MappingProxyType(validate_labels(dict(registration.labels), "labels"))
            registration.resources.validate()
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(str(exc)) from None
        _check_software(registration.software)
        self._check_metadata(labels, registration.software, registration.resources)
        capacity = registration.capacity or DEFAULT_CAPACITY
        entry = self._workers.get(name)
        same_worker = bool(
            entry
            and registration.session_token
            and _same_token(registration.session_token, entry.session_token)
        )
        if entry is not None and same_worker:
            entry.labels, entry.capacity, entry.transport = labels, capacity, registration.transport
            entry.report(registration.resources, registration.software)
            return entry.session_token
        if entry is not None and entry.connected:
            raise AlreadyExists(
                f"worker name {name!r} is held by a live stream; pick another name, or reconnect with its session token"
            )
        if entry is not None:
            # The grace period belongs to the worker whose stream dropped: only its session
            # token takes the name back. Anyone else waits for it to end (or for an operator).
            frees_at = (entry.disconnected_at or self.clock()) + self.settings.grace_period
            if self.clock() < frees_at:
                raise AlreadyExists(name_held(name, frees_at))
            # Its grace ended before the housekeeper noticed: recover its work now.
            requeued = self._lose_worker(entry, f"no stream for {self.settings.grace_period:g}s")
            if requeued:
                self._dispatch(shapes=requeued)
        elif len(self._workers) >= self.settings.max_workers:
            raise ResourceExhausted(
                f"{len(self._workers)} workers are registered; the limit is {self.settings.max_workers} "
                "(--max-workers); forget stale ones with 'flux worker forget NAME'"
            )
        token = secrets.token_urlsafe(24)
        # A pause is the operator's, by name (as a cordon is): a new process under the name stays paused.
        paused = entry is not None and entry.paused
        self._workers[name] = WorkerEntry(
            name=name,
            session_token=token,
            labels=labels,
            capacity=capacity,
            resources=registration.resources,
            software=registration.software,
            transport=registration.transport,
            last_seen=self.clock(),
            disconnected_at=self.clock(),
            paused=paused,
        )
        await self.store.save_worker(WorkerIdentity(name, token))
        return token

    async def forget_worker(self, name: str) -> int:
        """Drop a worker now (an operator's call): its work is requeued and its name is free.

        For a worker gone for good before its grace period ends, or one that must not
        come back. A connected worker loses its stream and must register again.
        """
        entry = self._workers.get(name)
        if entry is None:
            raise NotFound(f"worker {name!r} is not registered")
        if entry.session is not None:
            entry.session.close()
        held = len(entry.holdings)
        requeued = self._lose_worker(entry, "forgotten by an operator")
        if requeued:
            self._dispatch(shapes=requeued)
        return held

    def _check_metadata(
        self, labels: Mapping[str, str], software: WorkerSoftware | None, resources: WorkerResources
    ) -> None:
        size = _metadata_bytes(labels, software, resources)
        if size > self.settings.max_worker_metadata:
            raise ResourceExhausted(
                f"labels, packages, markers and GPU names take {size} bytes; the limit is "
                f"{self.settings.max_worker_metadata} per worker (--max-worker-metadata)"
            )

    def connect(self, name: str, session_token: str, transport: str = "grpc") -> Session:
        entry = self.authorize(name, session_token)
        if entry.session is not None:
            entry.session.close()  # the same worker reconnecting takes over its own stream
        session = Session(name, transport, tuple(entry.holdings))
        entry.session, entry.transport = session, transport
        entry.disconnected_at, entry.draining = None, False
        entry.ever_connected = True
        entry.invalidate()
        self.events.worker_connected(entry)
        self._dispatch(workers=[entry])
        return session

    def disconnect(self, session: Session) -> None:
        if session.overflowed:
            log.warning(
                "worker %s stopped reading its stream; closed it, its unread dispatches expire",
                session.worker,
            )
        session.close()
        entry = self._workers.get(session.worker)
        if entry is not None and entry.session is session:
            entry.session = None
            entry.disconnected_at = self.clock()
            entry.invalidate()
            self.events.worker_disconnected(entry)

    def report(
        self,
        name: str,
        session_token: str,
        resources: WorkerResources,
        software: WorkerSoftware | None,
        draining: bool,
    ) -> None:
        entry = self.authorize(name, session_token)
        try:
            resources.validate()
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        _check_software(software)
        self._check_metadata(entry.labels, software or entry.software, resources)
        entry.report(resources, software)
        started_draining = draining and not entry.draining
        entry.draining = draining
        self.events.worker_reported(entry, started_draining)
        self._dispatch(workers=[entry])

    def claim(self, name: str, session_token: str, execution_id: str, generation: int) -> Execution:
        self.authorize(name, session_token)
        execution = self._fenced(execution_id, name, generation)
        if execution.state is State.RUNNING:
            return execution  # a retried claim
        if execution.state is not State.SCHEDULED:
            raise FailedPrecondition(f"execution {execution_id} is {execution.state.label}, not SCHEDULED")
        running = execution.evolve(state=State.RUNNING, updated_at=self.clock())
        self._executions[execution_id] = running
        self.events.claimed(running)
        self._save_soon(running)
        self._notify(running)
        return running

    async def complete(
        self,
        name: str,
        session_token: str,
        execution_id: str,
        generation: int,
        output_json: str | None,
        error: ExecutionError | None,
        resources: WorkerResources | None = None,
    ) -> Execution:
        entry = self.authorize(name, session_token)
        execution = self._executions.get(execution_id)
        if execution is None:
            done = self._finished.get(execution_id) or await self.get(execution_id)
            if (
                done.worker == name
                and done.generation == generation
                and done.state in (State.COMPLETED, State.FAILED)
                and _same_result(done, output_json, error)
            ):
                # A retried Complete whose answer was lost: the first result stands. Store it
                # again, as the answer may have been lost because its commit failed.
                await self._save_final(done)
                return done
            raise FailedPrecondition(f"execution {execution_id} is already {done.state.label}")
        execution = self._fenced(execution_id, name, generation)
        if execution.state is not State.RUNNING:
            raise FailedPrecondition(
                f"execution {execution_id} is {execution.state.label}; claim it before completing"
            )
        if error is None:
            output_json = _checked_json(output_json or "null", "output_json")
            final = execution.evolve(state=State.COMPLETED, output_json=output_json, updated_at=self.clock())
        else:
            final = execution.evolve(state=State.FAILED, error=error, updated_at=self.clock())
        self._finish(final, entry)
        self.events.finished(final)
        if resources is not None:
            entry.report(resources, None)
        self._dispatch(workers=[entry])
        await self._save_final(final)
        return final

    async def _save_final(self, final: Execution) -> None:
        """Commit a final state, then tell watchers: nobody sees a result that a crash could undo.

        The worker forgets the result once we answer, so a failed commit reaches it
        as Unavailable: it retries, and the retry stores the recorded result again.
        """
        try:
            await self.store.save(final)
        except Conflict:
            self._forget(final.execution_id)
            raise FailedPrecondition(
                f"execution {final.execution_id} was cancelled or reassigned meanwhile; this result is not recorded"
            ) from None
        except Exception as exc:
            raise Unavailable(f"could not store the result of {final.execution_id}: {exc}") from exc
        self._committed(final)

    def _committed(self, final: Execution) -> None:
        self._committing.pop(final.execution_id, None)
        self._notify(final)

    def release(
        self, name: str, session_token: str, execution_id: str, generation: int, reason: str
    ) -> Execution:
        entry = self.authorize(name, session_token)
        execution = self._fenced(execution_id, name, generation)
        if execution.state not in (State.SCHEDULED, State.RUNNING):
            raise FailedPrecondition(
                f"execution {execution_id} is {execution.state.label}; nothing to release"
            )
        log.debug("execution %s released by %s: %s", execution_id, name, reason or "no reason given")
        requeued = self._requeue(execution, entry, next_attempt=False)
        self.events.requeued(execution, requeued, Requeue.RELEASED)
        self._dispatch(shapes=[self._shape_of(requeued)])
        self._dispatch(workers=[entry])
        return requeued

    def workers(self) -> list[WorkerEntry]:
        return sorted(self._workers.values(), key=lambda w: w.name)

    async def list_workers(self) -> list[WorkerEntry]:
        """Every worker a client may see (with replicas, those connected to the others too)."""
        return self.workers()

    def aging(self) -> Aging:
        """Aging's nominations, for status (read only)."""
        return self._aging

    def pending(self) -> PendingQueue:
        return self._queue

    def unfinished(self) -> Iterable[Execution]:
        return self._executions.values()

    # ----------------------------------------------------------------- internals

    def authorize(self, name: str, session_token: str) -> WorkerEntry:
        entry = self._workers.get(name)
        if entry is None:
            raise self._unknown_worker(name)
        if not session_token or not _same_token(session_token, entry.session_token):
            raise PermissionDenied(
                f"session_token does not match worker {name!r}; use the token Register returned"
            )
        entry.last_seen = self.clock()
        return entry

    def _unknown_worker(self, name: str) -> Exception:
        return NotFound(f"worker {name!r} is not registered; call Register first")

    def _fenced(self, execution_id: str, name: str, generation: int) -> Execution:
        _check_id(execution_id)
        execution = self._executions.get(execution_id)
        if execution is None:
            if execution_id in self._finished:
                raise FailedPrecondition(
                    f"execution {execution_id} is already {self._finished[execution_id].state.label}"
                )
            raise NotFound(f"execution {execution_id!r} does not exist or is finished")
        if execution.worker != name:
            raise FailedPrecondition(f"execution {execution_id} is not dispatched to worker {name!r}")
        if generation != execution.generation:
            raise FailedPrecondition(
                f"stale generation {generation} for execution {execution_id}; the current dispatch is {execution.generation}"
            )
        return execution

    def _dispatch(
        self, shapes: list[Shape] | None = None, workers: Iterable[WorkerEntry] | None = None
    ) -> int:
        placements = self._place(shapes, workers)
        now = self.clock()
        for placement in placements:
            execution = self._executions[placement.execution_id]
            execution = execution.evolve(
                state=State.SCHEDULED,
                worker=placement.worker,
                generation=execution.generation + 1,
                gpu_indices=placement.gpu_indices,
                updated_at=now,
            )
            # Not written to the store: after a restart an unclaimed dispatch goes
            # back to CREATED anyway, so the row stays CREATED until the claim.
            self._send(execution, self._workers[placement.worker], placement.shape.requests, now)
        return len(placements)

    def _place(
        self, shapes: list[Shape] | None, workers: Iterable[WorkerEntry] | None, starving_first: bool = True
    ) -> list[Placement]:
        """Decide placements and reserve them on their workers (the pure matcher decides)."""
        if not self._queue:
            return []
        pool = self._workers.values() if workers is None else workers
        views = [w.view() for w in pool if w.dispatchable]
        if not views:
            return []
        placements = schedule(
            self._queue,
            views,
            shapes=shapes,
            cache=self._cache,
            aging=self._aging,
            now=self.clock(),
            whole_fleet=workers is None,
            starving_first=starving_first,
        )
        for placement in placements:
            self._queue.remove(placement.execution_id)
            self._workers[placement.worker].hold(
                placement.execution_id, placement.shape.requests, placement.gpu_indices
            )
        return placements

    def _send(self, execution: Execution, entry: WorkerEntry, requests: ResourceRequest, now: float) -> None:
        """Push a dispatch (already reserved on ``entry``) to its worker and start its ack deadline."""
        self._executions[execution.execution_id] = execution
        assert entry.session is not None  # dispatchable implies connected
        entry.session.push(Scheduled(execution, requests))
        self.events.dispatched(execution)
        deadline = now + self.settings.ack_deadline
        heapq.heappush(self._deadlines, (deadline, execution.execution_id, execution.generation))
        self._notify(execution)

    def _requeue(self, execution: Execution, entry: WorkerEntry | None, next_attempt: bool) -> Execution:
        """Back to CREATED (keeping its place in line), or FAILED when out of attempts."""
        if entry is not None:
            entry.release(execution.execution_id)
        now = self.clock()
        attempt = execution.attempt + 1 if next_attempt else execution.attempt
        if attempt > execution.max_attempts:
            failed = execution.evolve(
                state=State.FAILED,
                updated_at=now,
                error=ExecutionError(
                    "WorkerLost",
                    f"worker {execution.worker} was lost while running attempt {execution.attempt} "
                    f"of {execution.max_attempts}",
                ),
            )
            self._finish(failed, None)
            self.store.save(failed).add_done_callback(
                lambda future: self._committed(failed) if _succeeded(future) else None
            )
            return failed
        requeued = execution.evolve(
            state=State.CREATED, worker="", gpu_indices=(), attempt=attempt, updated_at=now
        )
        if len(requeued.input_json) > self.settings.inline_input_bytes:
            requeued = requeued.evolve(input_json="")  # back to waiting: its input waits in the store
        self._executions[execution.execution_id] = requeued
        self._back_in_line(requeued)
        self._notify(requeued)
        return requeued

    def _back_in_line(self, requeued: Execution) -> None:
        self._enqueue(requeued, self._shape_of(requeued))
        self._save_soon(requeued)

    def _finish(self, final: Execution, entry: WorkerEntry | None) -> None:
        """Release the execution's hold now; show its final state only once committed (``_committed``)."""
        execution_id = final.execution_id
        previous = self._executions.pop(execution_id, None)
        if previous is not None:
            self._committing[execution_id] = previous
        if entry is not None:
            entry.release(execution_id)
        self._remember_finished(final)

    def _remember_finished(self, final: Execution) -> None:
        """Keep recent final states for quick answers, within a count and a payload byte budget."""
        previous = self._finished.pop(final.execution_id, None)
        if previous is not None:
            self._finished_bytes -= _payload_bytes(previous)
        self._finished[final.execution_id] = final
        self._finished_bytes += _payload_bytes(final)
        s = self.settings
        while self._finished and (
            len(self._finished) > s.finished_cache or self._finished_bytes > s.finished_cache_bytes
        ):
            _, dropped = self._finished.popitem(last=False)
            self._finished_bytes -= _payload_bytes(dropped)

    def _current(self, execution_id: str) -> Execution | None:
        """The latest committed-or-live state known in memory (a final state shows once committed)."""
        return (
            self._committing.get(execution_id)
            or self._executions.get(execution_id)
            or self._finished.get(execution_id)
        )

    def _notify(self, execution: Execution) -> None:
        for updates in self._watchers.get(execution.execution_id, ()):
            updates.put_nowait(execution)

    def _save_soon(self, execution: Execution) -> None:
        self.store.save(execution).add_done_callback(self._saved)

    def _saved(self, future: asyncio.Future[None]) -> None:
        if not future.cancelled() and isinstance(future.exception(), Conflict):
            self._forget(future.exception().execution_id)  # type: ignore[union-attr]
        else:
            _succeeded(future)

    def _forget(self, execution_id: str) -> None:
        """Another replica changed this execution: what we hold of it here is stale.

        Only a shared (PostgreSQL) store reports conflicts; ``ReplicaDispatcher`` acts on them.
        """

    def _lose_worker(self, entry: WorkerEntry, why: str) -> list[Shape]:
        """Requeue (or fail) everything the worker holds; return the shapes put back in the queue."""
        if entry.ever_connected or entry.holdings:
            log.warning("worker %s lost (%s); requeueing %d executions", entry.name, why, len(entry.holdings))
        else:  # registered, never opened its stream: nothing was lost
            log.info("worker %s registered but never connected (%s); forgotten", entry.name, why)
        shapes: dict[Shape, None] = {}
        for execution_id in list(entry.holdings):
            execution = self._executions.get(execution_id)
            if execution is None:
                entry.release(execution_id)
                continue
            # A dispatch never claimed did not run: same attempt. Running work did.
            requeued = self._requeue(execution, entry, next_attempt=execution.state is State.RUNNING)
            self.events.requeued(execution, requeued, Requeue.WORKER_LOST)
            if requeued.state is State.CREATED:
                shapes[self._shape_of(requeued)] = None
        if self._workers.get(entry.name) is entry:
            del self._workers[entry.name]
        return list(shapes)

    def _expire(self, now: float) -> bool:
        changed = False
        while self._deadlines and self._deadlines[0][0] <= now:
            _, execution_id, generation = heapq.heappop(self._deadlines)
            execution = self._executions.get(execution_id)
            if (
                execution is None
                or execution.state is not State.SCHEDULED
                or execution.generation != generation
            ):
                continue
            entry = self._workers.get(execution.worker)
            log.warning(
                "execution %s not claimed by %s within the ack deadline", execution_id, execution.worker
            )
            if entry is not None and entry.session is not None:
                entry.session.push(Cancelled(execution_id, generation, "ack deadline expired"))
            self.events.expired(execution)
            self._requeue(execution, entry, next_attempt=False)
            changed = True
        grace = self.settings.grace_period
        for entry in list(self._workers.values()):
            if entry.disconnected_at is not None and now - entry.disconnected_at >= grace:
                self._lose_worker(entry, f"no stream for {grace:g}s")
                changed = True
        return changed

    def _keep_alive(self, now: float) -> None:
        """Ping idle streams; a worker whose stream is open counts as seen now, not at its last call."""
        idle_since = time.monotonic() - self.settings.ping_interval
        for entry in self._workers.values():
            session = entry.session
            if session is not None:
                entry.last_seen = now
                if session.last_sent <= idle_since:
                    session.push(Ping(now))

    async def _housekeeping(self) -> None:
        s = self.settings
        step = max(0.05, min(1.0, s.ack_deadline / 4, s.grace_period / 4, s.safety_tick))
        while True:
            await asyncio.sleep(step)
            try:
                now = self.clock()
                if self._expire(now) or now - self._last_full_pass >= s.safety_tick:
                    self._last_full_pass = now
                    self._dispatch()
                self._keep_alive(now)
            except Exception:  # one bad tick must not stop the next one
                log.exception("dispatcher housekeeping failed")


def _checked_priority(priority: int) -> int:
    try:
        return validate_priority(priority)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'hello'?`` for a near miss among the registered names, else ""."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def _same_token(given: str, expected: str) -> bool:
    # Bytes, not str: compare_digest refuses non-ASCII str, and a token is whatever a caller sends.
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN and Infinity; JSON (and every other reader of the result) does not.
    raise ValueError(f"{name} is not JSON")


def _checked_json(text: str, field: str) -> str:
    if len(text) > MAX_JSON_BYTES:
        raise ResourceExhausted(f"{field} is larger than the {MAX_JSON_BYTES} byte limit")
    try:
        json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise InvalidArgument(f"{field} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidArgument(f"{field} nests too deeply") from None
    return text


def _check_software(software: WorkerSoftware | None) -> None:
    if software is None:
        return
    if len(software.packages) > MAX_WORKER_PACKAGES:
        raise ResourceExhausted(
            f"software.packages lists {len(software.packages)} distributions; the limit is {MAX_WORKER_PACKAGES}"
        )
    if len(software.runtimes) > MAX_RUNTIMES:
        raise ResourceExhausted(f"software.runtimes lists more than {MAX_RUNTIMES} runtimes")
    for position, runtime in enumerate(software.runtimes):
        name = runtime.split(None, 1)[0] if runtime.strip() else ""
        if len(runtime) > 64 or not RUNTIME_NAME.fullmatch(name):
            raise InvalidArgument(
                f'software.runtimes[{position}] {runtime[:64]!r} is invalid; give "NAME" or "NAME VERSION" '
                f"(at most 64 characters), NAME being {RUNTIME_FORM}"
            )
    if len(software.marker_environment) > MAX_MARKERS:
        raise ResourceExhausted(f"software.marker_environment has more than {MAX_MARKERS} entries")
    for name, version in software.packages.items():
        if not name or len(name) > MAX_TEXT or len(version) > MAX_TEXT:
            raise InvalidArgument(
                f"software.packages entry {name[:MAX_TEXT]!r} needs a name and version of 1-{MAX_TEXT} characters"
            )


def name_held(name: str, frees_at: float) -> str:
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(frees_at))
    return (
        f"worker name {name!r} belongs to a worker whose stream dropped; it keeps the name for its grace "
        f"period, until {when}, unless it reconnects with its session token. To free it now, an operator "
        f"runs 'flux worker forget {name}'"
    )


def _metadata_bytes(
    labels: Mapping[str, str], software: WorkerSoftware | None, resources: WorkerResources
) -> int:
    size = sum(len(k) + len(v) for k, v in labels.items())
    if software is not None:
        size += sum(len(k) + len(v) for k, v in software.packages.items())
        size += sum(len(k) + len(v) for k, v in software.marker_environment.items())
    return size + sum(len(g.uuid) + len(g.name) for g in resources.gpus)


def _with_input(execution: Execution, input_json: str) -> Execution:
    return execution if execution.input_json or not input_json else execution.evolve(input_json=input_json)


def _payload_bytes(execution: Execution) -> int:
    error = execution.error
    size = len(execution.input_json) + len(execution.output_json or "")
    return size + (len(error.message) + len(error.traceback) if error is not None else 0)


def _check_id(execution_id: str) -> None:
    if not execution_id or len(execution_id) > MAX_ID_LENGTH:
        raise InvalidArgument(f"execution_id must be 1-{MAX_ID_LENGTH} characters; got {execution_id!r:.80}")


def _same_result(done: Execution, output_json: str | None, error: ExecutionError | None) -> bool:
    """Whether a Complete repeats the result already recorded (a retry), not a different one."""
    if error is not None:
        return done.state is State.FAILED and done.error == error
    return done.state is State.COMPLETED and done.output_json == (output_json or "null")


def _succeeded(future: asyncio.Future[None]) -> bool:
    if future.cancelled():
        return False
    if future.exception() is not None:
        log.error("store write failed: %s", future.exception())
        return False
    return True
