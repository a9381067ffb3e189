"""The worker process: register, hold the dispatch stream, run executions, report results.

One asyncio loop. Async workflows run on it; sync ones in a thread pool sized
to the worker's capacity. The stream is re-established with exponential
backoff and jitter whenever it drops; results that cannot be delivered are
retried until the control plane takes them, because the worker is the only
place they exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from flux import defaults
from flux.domain.execution import result_bytes
from flux.domain.worker import WorkerResources
from flux.errors import (
    FluxError,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from flux.worker.backoff import Backoff
from flux.worker.batching import Batcher
from flux.worker.claims import ClaimCall, Running
from flux.worker.code_cache import CodeCache
from flux.worker.executions import Executions
from flux.worker.prefetch import LocalQueue, ResultsInFlight
from flux.worker.probe import ResourceProbe, changed_materially
from flux.worker.transport import Answers, Cancel, Connected, Dispatch, Outcome, Registration, WorkerTransport

log = logging.getLogger("flux.worker")

# Answers to Register or Connect that no retry can change: the token is missing, wrong or of the
# wrong kind, or the server refuses what the worker advertises. Anything else (unreachable, 5xx,
# a name still held by the previous stream) may pass, so the worker retries it.
PERMANENT = (Unauthenticated, PermissionDenied, InvalidArgument)

# Results carry the resources observed after their executions ended. A sample walks the
# worker's process tree (all of /proc, 15% of a busy worker's time at 0.25 s): a burst of
# results shares one this recent, seconds. The CPU figure is a 5 s window anyway, and the
# server counts its own reservations, so a second-old free figure places nothing wrongly.
RESULT_SAMPLE_MAX_AGE = 1.0

# A Release that did not get through is tried this many times, backing off from the first to
# the longest wait (seconds), before the server's stop grace is left to free the room: grpc
# itself answers some of a burst of calls CANCELLED (2,000 stops at once, bench timers).
RELEASE_TRIES = 6
RELEASE_RETRY_FIRST, RELEASE_RETRY_MAX = 0.05, 2.0


class Refused(FluxError):
    """The control plane refused this worker for good; the message is its answer, ``cause`` the error."""

    def __init__(self, cause: FluxError):
        super().__init__(str(cause))
        self.cause = cause


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    capacity: int = defaults.CAPACITY
    # Where gang members reach this worker (--advertise-address); "": as the server sees it connect.
    advertise_address: str = ""
    work_dir: Path = Path(defaults.WORK_DIR)
    report_interval: float = 2.0
    # How long SIGTERM waits for running executions before releasing them.
    drain_timeout: float = defaults.DRAIN_TIMEOUT
    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    # Executions the server may queue here beyond this worker's room (flux/worker/prefetch.py).
    prefetch: int = 0


class WorkerRuntime(Executions):
    def __init__(self, config: WorkerConfig, transport: WorkerTransport, probe: ResourceProbe):
        self.config = config
        self.transport = transport
        self.probe = probe
        self.token = ""
        self.connected = asyncio.Event()
        # Counts Connected events: each is a new stream, perhaps to another replica.
        self._streams = 0
        self._running: dict[str, Running] = {}
        self._queued = LocalQueue()
        self._in_flight = ResultsInFlight()
        self._stopping = asyncio.Event()
        self._threads = ThreadPoolExecutor(
            max_workers=max(1, config.capacity), thread_name_prefix="flux-workflow"
        )
        self._code = CodeCache(config.work_dir / config.name / "code", self._fetch_source)
        self._reported: WorkerResources | None = None
        self._sampled: tuple[float, WorkerResources] | None = None  # (monotonic time, sample)
        # Claims and results that are ready together go in one call (ClaimBatch, CompleteBatch),
        # while the server has them; one that answers UNIMPLEMENTED gets single calls.
        self._batched = True
        # Whether the server we are connected to takes a claim inside a result (Connected says).
        self._claims_with_results = False
        self._claims: Batcher[ClaimCall] = Batcher(self._send_claims)
        self._results: Batcher[Outcome] = Batcher(self._send_results, _outcome_size)

    # ----------------------------------------------------------------- lifecycle

    @property
    def ready(self) -> bool:
        """Whether work can reach this worker now: its dispatch stream is up and it is not draining."""
        return self.connected.is_set() and not self._stopping.is_set()

    def stop(self) -> None:
        """Begin draining: take no new work, finish what runs, then exit ``run``."""
        if not self._stopping.is_set():
            log.info("draining: %d executions running", len(self._running))
            self._stopping.set()

    async def run(self) -> None:
        """Serve until ``stop``; raises ``Refused`` (after cleaning up) when the server refuses us for good."""
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        reporter = asyncio.create_task(self._report_loop())
        try:
            while not self._stopping.is_set():
                session = asyncio.create_task(self._session(backoff))
                stopping = asyncio.create_task(self._stopping.wait())
                await asyncio.wait({session, stopping}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if session.done():
                    refusal = session.exception()
                    if isinstance(refusal, PERMANENT):
                        if self._running:
                            await self._drain()
                        raise Refused(refusal)
                    self._log_session_end(session)
                else:
                    await self._drain()
                    session.cancel()
                    await asyncio.gather(session, return_exceptions=True)
                    break
                self.connected.clear()
                if not self._stopping.is_set():
                    delay = backoff.next()
                    log.info("reconnecting in %.2fs", delay)
                    rotate = getattr(self.transport, "rotate", None)
                    if rotate is not None:
                        rotate()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopping.wait(), delay)
            if self._running:  # stopped while disconnected
                await self._drain()
        finally:
            reporter.cancel()
            await asyncio.gather(reporter, return_exceptions=True)
            await self.transport.close()
            self._threads.shutdown(wait=False, cancel_futures=True)

    def _log_session_end(self, session: asyncio.Task[None]) -> None:
        exc = session.exception()
        if exc is None:
            log.warning("dispatch stream closed by the server")
        elif isinstance(exc, Unavailable):
            log.warning("control plane unavailable: %s", exc)
        else:
            log.error("session failed: %s: %s", type(exc).__name__, exc)

    async def _session(self, backoff: Backoff) -> None:
        registration = Registration(
            name=self.config.name,
            resources=self.probe.sample(),
            software=self.probe.software(),
            labels=self.config.labels,
            capacity=self.config.capacity,
            session_token=self.token,
            advertise_address=self.config.advertise_address,
            prefetch=self.config.prefetch,
        )
        self.token = await self.transport.register(registration)
        self._reported = registration.resources
        async for event in self.transport.connect(self.config.name, self.token):
            if isinstance(event, Dispatch):
                self._start(event)
            elif isinstance(event, Cancel):
                self._cancel(event)
            elif isinstance(event, Connected):
                backoff.reset()
                self._streams += 1
                self._batched = True  # perhaps another server: ask it for batches again
                self._claims_with_results = event.claims_with_results
                self._queued.clear()  # the server took our queue back when the last stream closed
                self._reconcile(event.held)
                self.connected.set()
                log.info("connected to %s as %s", event.server_id, self.config.name)

    async def _drain(self) -> None:
        self._queued.clear()  # the server takes a draining worker's queue back when it hears of it
        try:
            await self.transport.report(
                self.config.name, self.token, self.probe.sample(), None, draining=True
            )
        except FluxError as exc:
            log.warning("could not announce draining: %s", exc)
        tasks = [r.task for r in self._running.values()]
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=self.config.drain_timeout)
            for task in pending:
                task.cancel()  # _execute releases them
            await asyncio.gather(*pending, return_exceptions=True)

    # ----------------------------------------------------------------- events

    def _start(self, dispatch: Dispatch) -> None:
        stale = self._running.get(dispatch.execution_id)
        if stale is not None:
            if stale.dispatch.generation >= dispatch.generation:
                return  # a duplicate frame of something already running
            # Requeued while we were away and dispatched here again: the old try is fenced off.
            stale.cancelled_by_server = True
            stale.task.cancel()
        if dispatch.queued:
            if not self._stopping.is_set():  # else our draining report takes it back
                self._queued.add(dispatch)
                self._room_freed()
            return
        if self._stopping.is_set():
            asyncio.create_task(self._release(dispatch.execution_id, dispatch.generation, "worker draining"))
            return
        self._run(dispatch)

    def _run(self, dispatch: Dispatch, after: tuple[asyncio.Future[None], ...] = ()) -> None:
        task = asyncio.create_task(self._execute(dispatch), name=f"execution-{dispatch.execution_id}")
        self._running[dispatch.execution_id] = Running(dispatch, task, after=after)

    def _room_freed(self) -> None:
        """Start what our own queue holds, in order, as far as our room allows (each claimed then)."""
        if not len(self._queued) or self._stopping.is_set():
            return
        running = (r.dispatch.requests for r in self._running.values() if not r.body_ended)
        after = self._in_flight.snapshot()
        for dispatch in self._queued.ready(running, self.config.capacity, self._reported):
            self._run(dispatch, after)

    def _cancel(self, cancel: Cancel) -> None:
        if self._queued.drop(cancel.execution_id, cancel.generation):
            log.info("queued execution %s cancelled: %s", cancel.execution_id, cancel.reason)
            return
        running = self._running.get(cancel.execution_id)
        if running is not None and running.dispatch.generation == cancel.generation:
            if running.cancelled_by_server and running.preempted and cancel.preempted:
                # Asked already to hand it back: a Stop repeated on a new stream (the server cannot
                # know the first arrived). A second cancel would cut short the body's own clean-up
                # after the first; a Stop that is not a hand-back (a grace ran out) still cancels.
                log.debug("execution %s told again to stop: %s", cancel.execution_id, cancel.reason)
                return
            log.info("execution %s cancelled: %s", cancel.execution_id, cancel.reason)
            running.cancelled_by_server = True
            running.preempted = cancel.preempted
            running.task.cancel()

    def _reconcile(self, held: Mapping[str, int]) -> None:
        """After a reconnect, make the server's view and ours agree.

        Work the server no longer believes is ours was requeued: stop it. Work it believes
        is ours that we do not run (a claim whose answer was lost as the server died, a
        dispatch frame lost with the old stream) would stay RUNNING with nobody on it, and
        no grace period ends for a worker that is back: release it, so it runs elsewhere now.
        """
        for execution_id, running in list(self._running.items()):
            if held.get(execution_id) not in (running.dispatch.generation, 0):
                log.warning("execution %s was reassigned while disconnected; abandoning it", execution_id)
                running.cancelled_by_server = True
                running.task.cancel()
            elif running.claimed_in is not None:
                asyncio.create_task(self._reclaim(running))  # before the adopter's ack deadline
        for execution_id, generation in held.items():
            if execution_id not in self._running and generation:
                log.warning("the server believes execution %s is running here; releasing it", execution_id)
                asyncio.create_task(
                    self._release(execution_id, generation, "not running on this worker after a reconnect")
                )

    async def _send_claims(self, calls: list[ClaimCall]) -> Answers:
        items = [(call.execution_id, call.generation) for call in calls]
        if self._batched:
            try:
                return await self.transport.claim_batch(
                    self.config.name, self.token, items, on_written=lambda: ClaimCall.all_written(calls)
                )
            except Unimplemented as exc:
                self._unbatched(exc)
        return await _each(
            self.transport.claim(self.config.name, self.token, execution_id, generation)
            for execution_id, generation in items
        )

    async def _send_results(self, items: list[Outcome]) -> Answers:
        resources = self._sample_for_results()
        answers: Answers | None = None
        if self._batched:
            try:
                answers = await self.transport.complete_batch(self.config.name, self.token, items, resources)
            except Unimplemented as exc:
                self._unbatched(exc)
        if answers is None:
            answers = await _each(self._complete_one(o, resources) for o in items)
        if any(answer is None for answer in answers):
            self._reported = resources
        return answers

    async def _complete_one(self, o: Outcome, resources: WorkerResources) -> None:
        if o.claim:  # a single Complete carries no claim: the claim goes first, on its own
            await self.transport.claim(self.config.name, self.token, o.execution_id, o.generation)
        await self.transport.complete(
            self.config.name, self.token, o.execution_id, o.generation, o.output_json, o.error, resources
        )

    def _sample_for_results(self) -> WorkerResources:
        """One observation for a batch (its executions have all ended), shared by a burst of batches."""
        now = time.monotonic()
        if self._sampled is None or now - self._sampled[0] > RESULT_SAMPLE_MAX_AGE:
            self._sampled = (now, self.probe.sample())
        return self._sampled[1]

    def _unbatched(self, exc: Unimplemented) -> None:
        if self._batched:
            log.info("the server has no batched calls (%s); claiming and completing one at a time", exc)
            self._batched = False
            self._claims_with_results = False  # a single Complete carries no claim

    async def _release(self, execution_id: str, generation: int, reason: str) -> None:
        """Hand a stopped execution back; the room it held is freed only when the server hears it,
        so a call that did not get through is tried again (the generation fences a repeat)."""
        backoff = Backoff(RELEASE_RETRY_FIRST, RELEASE_RETRY_MAX)
        for attempt in range(1, RELEASE_TRIES + 1):
            try:
                await self.transport.release(self.config.name, self.token, execution_id, generation, reason)
                return
            except Unavailable as exc:
                if attempt == RELEASE_TRIES:
                    log.info("release of %s not delivered after %d tries: %s", execution_id, attempt, exc)
                    return
                await asyncio.sleep(backoff.next())
            except FluxError as exc:
                log.info("release of %s not accepted: %s", execution_id, exc)
                return

    async def _heartbeat(self, execution_id: str, generation: int, details_json: str) -> None:
        try:
            await self.transport.heartbeat(
                self.config.name, self.token, execution_id, generation, details_json
            )
        except FluxError as exc:  # the next one may land; a stop comes on the stream if it matters
            log.debug("heartbeat of %s not accepted: %s", execution_id, exc)

    async def _fetch_source(self, source_hash: str) -> tuple[str, str]:
        return await self.transport.get_source(self.config.name, self.token, source_hash)

    # ----------------------------------------------------------------- reports

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.report_interval)
            if not self.connected.is_set():
                continue
            try:
                sample = await asyncio.get_running_loop().run_in_executor(None, self.probe.sample)
                if self._reported is None or changed_materially(self._reported, sample):
                    await self.transport.report(
                        self.config.name, self.token, sample, None, draining=self._stopping.is_set()
                    )
                    self._reported = sample
            except FluxError as exc:
                log.debug("resource report failed: %s", exc)


async def _each(calls: Iterable[Awaitable[None]]) -> Answers:
    """Single calls side by side, each answered as a batch item: None, or its refusal."""

    async def one(call: Awaitable[None]) -> FluxError | None:
        try:
            await call
        except FluxError as exc:
            return exc
        return None

    return list(await asyncio.gather(*(one(call) for call in calls)))


def _outcome_size(outcome: Outcome) -> int:
    return result_bytes(outcome.output_json, outcome.error)
