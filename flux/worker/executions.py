"""One execution on the worker once its dispatch arrives: claim it and, meanwhile, call the workflow's
function (fetching its code), deliver the result, each retried while the control plane is unreachable,
and the spans around them. ``WorkerRuntime`` holds the state these read; ``Running`` is its
record of an execution that runs, ``Backoff`` the delay between tries.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import random
import sys
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

from flux.context import ExecutionContext
from flux.domain.execution import ExecutionError
from flux.errors import (
    FailedPrecondition,
    FluxError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from flux.observe import tracing
from flux.worker.batching import Batcher
from flux.worker.code_cache import CodeCache
from flux.worker.transport import Dispatch, Outcome

T = TypeVar("T")

log = logging.getLogger("flux.worker")


class Backoff:
    """Exponential backoff with full jitter, so a fleet does not reconnect in lockstep."""

    def __init__(self, initial: float, maximum: float):
        self.initial, self.maximum, self.attempt = initial, maximum, 0

    def next(self) -> float:
        delay = min(self.maximum, self.initial * 2**self.attempt)
        self.attempt += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0


@dataclass(slots=True)
class Running:
    dispatch: Dispatch
    task: asyncio.Task[None]
    cancelled_by_server: bool = False
    # Stopped so a tenant could reclaim its quota: handed back (Release), not dropped.
    preempted: bool = False
    # The stream (count of Connected) during which the server last accepted our claim; None
    # before the first. A server reached on a later stream may not know of it: a replica that
    # adopted this dispatch holds it as unclaimed if the one that answered died before storing it.
    claimed_in: int | None = None


# A body that ends within this sends its claim inside its result's call, where the server takes that:
# one message each way instead of two. A longer one is claimed once this has passed, so the server
# shows it RUNNING; the body does not wait for it either way (it started with the dispatch).
CLAIM_DELAY = 0.02


class PendingClaim:
    """An execution's claim: sent now, or held back ``delay`` seconds in case its result can carry it."""

    def __init__(self, send: Callable[[], asyncio.Task[bool]], delay: float | None):
        self._send = send
        self._task: asyncio.Task[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        if delay is None:
            self._start()
        else:
            self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._timer = None
        self._task = self._send()

    def settle(self) -> asyncio.Task[bool] | None:
        """The claim's call; None when it was still held back, and then it is never sent: the result
        carries it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return self._task

    def cancel(self) -> None:
        task = self.settle()
        if task is not None:
            task.cancel()


@dataclass(frozen=True, slots=True)
class ClaimCall:
    """One claim for the claims batcher."""

    execution_id: str
    generation: int
    # Set once the claim is on a stream the server reads in order: a result sent after it is read
    # after it, so it need not wait for the claim's answer. Never set where calls are not ordered.
    written: asyncio.Future[None] | None = None

    @staticmethod
    def all_written(calls: list[ClaimCall]) -> None:
        for call in calls:
            if call.written is not None and not call.written.done():
                call.written.set_result(None)


def error_of(exc: BaseException) -> ExecutionError:
    """The error a body raised, with its bases' names (a retry policy's names match those too)."""
    bases = tuple(k.__name__ for k in type(exc).__mro__[1:] if k is not object)
    return ExecutionError(type(exc).__qualname__, str(exc), traceback.format_exc(), bases)


class Heartbeats:
    """``ctx.heartbeat`` of one execution: called from the body (the loop, a thread, or the child
    process's pipe), sent at most once per interval with the latest details.

    A call only stores the details and, once per interval, schedules a send on the loop, so a
    body may call it in a tight loop. The details are serialised when sent: the latest object wins.
    """

    # Without a heartbeat timeout, heartbeats only carry details for the next attempt: one a second.
    DEFAULT_INTERVAL = 1.0

    def __init__(self, owner: Executions, dispatch: Dispatch):
        self.owner, self.dispatch = owner, dispatch
        self.interval = dispatch.heartbeat_interval or self.DEFAULT_INTERVAL
        self.loop = asyncio.get_running_loop()
        self.latest: object = None
        self.raw: str | None = None  # already JSON (from the child process)
        self.scheduled = False
        self.sent_at = 0.0
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None

    def __call__(self, details: object = None) -> None:
        self.latest, self.raw = details, None
        self._kick()

    def raw_beat(self, details_json: str) -> None:
        self.raw = details_json
        self._kick()

    def _kick(self) -> None:
        if self.scheduled or self.closed:
            return
        self.scheduled = True
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a sync body's thread
            self.loop.call_soon_threadsafe(self._schedule)
        else:
            self._schedule()

    def _schedule(self) -> None:
        delay = max(0.0, self.sent_at + self.interval - self.loop.time())
        self.timer = self.loop.call_later(delay, self._send)

    def _send(self) -> asyncio.Task[None] | None:
        self.scheduled = False
        if self.closed:
            return None
        self.sent_at = self.loop.time()
        try:
            details = self.raw if self.raw is not None else json.dumps(self.latest, allow_nan=False)
        except (TypeError, ValueError) as exc:
            log.warning("heartbeat details of %s are not JSON: %s", self.dispatch.execution_id, exc)
            details = ""
        task = self.loop.create_task(
            self.owner._heartbeat(self.dispatch.execution_id, self.dispatch.generation, details)
        )
        task.add_done_callback(_quiet)
        return task

    async def close(self) -> None:
        """No more heartbeats; the latest details, if not sent yet, are sent first, so an attempt
        that fails right after a heartbeat leaves them to the next one (ctx.last_heartbeat)."""
        pending = None
        if self.scheduled and self.timer is not None:
            self.timer.cancel()
            pending = self._send()
        self.closed = True
        if pending is not None:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(pending), 5.0)


def _quiet(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("heartbeat not delivered: %s", task.exception())


async def in_child(
    fn: Callable[..., object], ctx: ExecutionContext[object], beats: Heartbeats
) -> tuple[str | None, ExecutionError | None]:
    """Run a sync body in ``python -m flux.worker.child``; killed if this task is cancelled."""
    module = inspect.getmodule(fn)
    path = getattr(module, "__file__", None)
    if module is None or path is None:
        return None, ExecutionError("WorkflowCodeError", "the workflow's file could not be found to run it")
    job = {
        "path": path,
        "module": module.__name__,
        "entrypoint": fn.__name__,
        "interval": beats.interval,
        "context": {
            "input": ctx.input,
            "execution_id": ctx.execution_id,
            "workflow_name": ctx.workflow_name,
            "worker_name": ctx.worker_name,
            "attempt": ctx.attempt,
            "assigned_gpus": list(ctx.assigned_gpus),
            "last_heartbeat": ctx.last_heartbeat,
        },
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "flux.worker.child",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=64 << 20,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(job).encode() + b"\n")
        await process.stdin.drain()
        process.stdin.close()
        while True:
            line = await process.stdout.readline()
            if not line:
                code = await process.wait()
                return None, ExecutionError(
                    "ChildProcessError", f"the body's process ended without a result (exit {code})"
                )
            item = json.loads(line)
            if item[0] == "beat":
                beats.raw_beat(item[1])
            elif item[0] == "ok":
                return item[1], None
            else:
                return None, ExecutionError(item[1], item[2], item[3], tuple(item[4]))
    finally:
        if process.returncode is None:
            process.kill()  # stopped (cancelled) or done: never leave the body running
            await asyncio.shield(process.wait())


class _Config(Protocol):
    """What of ``WorkerConfig`` an execution reads (that module imports this one)."""

    @property
    def name(self) -> str: ...
    @property
    def backoff_initial(self) -> float: ...
    @property
    def backoff_max(self) -> float: ...


class Executions:
    """The part of ``WorkerRuntime`` that takes one execution from its claim to its result."""

    # Set by WorkerRuntime.__init__ (and the stream count by its session).
    config: _Config
    _streams: int
    _running: dict[str, Running]
    _threads: ThreadPoolExecutor
    _code: CodeCache
    _claims: Batcher[ClaimCall]
    _results: Batcher[Outcome]
    _claims_with_results: bool

    async def _release(self, execution_id: str, generation: int, reason: str) -> None:
        raise NotImplementedError

    async def _heartbeat(self, execution_id: str, generation: int, details_json: str) -> None:
        raise NotImplementedError

    async def _execute(self, dispatch: Dispatch) -> None:
        """Claim and run at once: the body starts while the claim is on its way (execution is
        at-least-once), and its result follows the claim without waiting for the claim's answer
        where the server reads the two in order. A refused claim stops the body and drops its
        result; the server shows the execution RUNNING only once it has the claim.

        Where the server takes a claim inside a result, the claim waits ``CLAIM_DELAY`` first: a
        body that ends sooner sends its claim with its result, one call instead of two. A traced
        execution claims at once, so its trace shows the claim as the call it documents.
        """
        execution_id = dispatch.execution_id
        traced = tracing.ACTIVE and bool(dispatch.trace)
        streams = self._streams
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def send() -> asyncio.Task[bool]:
            task = asyncio.create_task(
                self._traced_claim(dispatch, written) if traced else self._claim(dispatch, written)
            )
            task.add_done_callback(answered)
            return task

        def answered(claim: asyncio.Task[bool]) -> None:
            if not written.done():  # answered before it was seen written (calls not ordered): go on
                written.set_result(None)
            running = self._running.get(execution_id)
            if claim.cancelled() or claim.exception() is not None:
                return
            if running is None or running.dispatch is not dispatch:
                return
            if claim.result():
                running.claimed_in = streams  # now, not when the body ends: a reconnect claims it again
            else:
                # Stop the body, or the delivery of its result: it was never ours to hand back.
                running.cancelled_by_server = True
                running.task.cancel()

        claim = PendingClaim(send, None if traced or not self._claims_with_results else CLAIM_DELAY)
        try:
            if traced:
                output_json, error = await self._traced_invoke(dispatch)
                with tracing.span("flux.complete", dispatch.trace, "CLIENT", **self._span_fields(dispatch)):
                    await self._complete(dispatch, claim.settle(), written, output_json, error)
            else:
                output_json, error = await self._invoke(dispatch)
                await self._complete(dispatch, claim.settle(), written, output_json, error)
        except asyncio.CancelledError:
            claim.cancel()  # a claim not yet sent stays unsent: it would land after the release below
            running = self._running.get(execution_id)
            if running is None or running.dispatch is dispatch and not running.cancelled_by_server:
                # Drain timed out: hand the execution back so another worker runs it.
                await asyncio.shield(
                    self._release(execution_id, dispatch.generation, "worker stopped before finishing")
                )
            elif running.dispatch is dispatch and running.preempted:
                # The server holds its room until we hand it back (or its grace runs out).
                await asyncio.shield(self._release(execution_id, dispatch.generation, "preempted"))
        finally:
            claim.cancel()  # done by now, unless this execution was stopped
            running = self._running.get(execution_id)
            if running is not None and running.dispatch is dispatch:  # not a newer dispatch of it
                del self._running[execution_id]

    async def _complete(
        self,
        dispatch: Dispatch,
        claim: asyncio.Task[bool] | None,
        written: asyncio.Future[None],
        output_json: str | None,
        error: ExecutionError | None,
    ) -> None:
        """Deliver the result once the claim is accepted, or sooner: right behind the written claim,
        or carrying the claim itself where it was never sent (``claim`` None).

        That first try is one try. The server refuses a result for an execution it has not seen
        claimed, so a claim lost with its stream costs only the wait for the claim's retry and a
        second delivery; a result accepted is recorded once whatever its claim's answer said.
        """
        if claim is None:
            await self._deliver_claiming(dispatch, output_json, error)
            return
        delivered = False
        if not claim.done():
            await written  # set by the claim's answer too
            if not claim.done():
                delivered = await self._deliver_once(dispatch, output_json, error)
        if not await claim:
            return  # the refusal has stopped this task already; here only if it raced the answer
        if not delivered:
            await self._deliver(dispatch, output_json, error)

    async def _deliver_once(
        self, dispatch: Dispatch, output_json: str | None, error: ExecutionError | None
    ) -> bool:
        try:
            await self._results.submit(
                Outcome(dispatch.execution_id, dispatch.generation, output_json, error)
            )
            return True
        except FluxError as exc:  # delivered again, with all of _deliver's care, once the claim is answered
            log.debug("result of %s sent behind its claim not taken: %s", dispatch.execution_id, exc)
            return False

    async def _deliver_claiming(
        self, dispatch: Dispatch, output_json: str | None, error: ExecutionError | None
    ) -> None:
        """Deliver a result that carries its execution's claim (the claim was never sent).

        A refusal may be the claim's alone: a server reached after a reconnect that takes no claim
        inside a result says "claim it before completing". So a refused result claims on its own
        and, if that is accepted, is delivered again; a claim refused too means it was never ours.
        """
        if await self._deliver(dispatch, output_json, error, claiming=True):
            return
        if await self._claim(dispatch):
            running = self._running.get(dispatch.execution_id)
            if running is not None and running.dispatch is dispatch:
                running.claimed_in = self._streams
            await self._deliver(dispatch, output_json, error)

    async def _claim(self, dispatch: Dispatch, written: asyncio.Future[None] | None = None) -> bool:
        """Claim, retrying while the control plane is unreachable; False when refused.

        Giving up on an unreachable server would drop work the server may already have
        recorded as claimed (its answer lost as it died). A retried claim of a RUNNING
        execution is accepted, and a reconnect's Connected cancels the try if the server
        no longer holds it for us.
        """
        call = ClaimCall(dispatch.execution_id, dispatch.generation, written)
        try:
            await self._while_unreachable(f"claim {dispatch.execution_id}", lambda: self._claims.submit(call))
            return True
        except (FailedPrecondition, NotFound, PermissionDenied) as exc:
            log.info("claim of %s refused: %s", dispatch.execution_id, exc)
            return False

    def _span_fields(self, dispatch: Dispatch) -> dict[str, object]:
        return {
            "flux.execution.id": dispatch.execution_id,
            "flux.workflow.name": dispatch.workflow.name,
            "flux.workflow.version": dispatch.workflow.version,
            "flux.attempt": dispatch.attempt,
            "flux.generation": dispatch.generation,
            "flux.worker": self.config.name,
        }

    async def _traced_claim(self, dispatch: Dispatch, written: asyncio.Future[None]) -> bool:
        with tracing.span("flux.claim", dispatch.trace, "CLIENT", **self._span_fields(dispatch)) as span:
            claimed = await self._claim(dispatch, written)
            if not claimed:
                span.set_attribute("error.type", "claim_refused")
            return claimed

    async def _traced_invoke(self, dispatch: Dispatch) -> tuple[str | None, ExecutionError | None]:
        # Current while the workflow runs (also in its thread), so the user's own spans nest under it.
        with tracing.span("flux.execute", dispatch.trace, "CONSUMER", **self._span_fields(dispatch)) as span:
            output_json, error = await self._invoke(dispatch)
            if error is not None:
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute("error.type", error.type)
                span.set_status(Status(StatusCode.ERROR, error.type))
            return output_json, error

    async def _function(self, dispatch: Dispatch) -> Callable[..., object]:
        """The workflow's function, fetching its code while the control plane is unreachable.

        An unreachable server (a replica that died just after our claim) says nothing about the
        workflow: failing the execution for it would record a failure the code never had.
        """
        return await self._while_unreachable(
            f"fetch the code of {dispatch.workflow.name}", lambda: self._code.function(dispatch.workflow)
        )

    async def _while_unreachable(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, again after a backoff each time the control plane is unreachable."""
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        while True:
            try:
                return await call()
            except Unavailable as exc:
                delay = backoff.next()
                log.warning("could not %s (%s); retrying in %.2fs", what, exc, delay)
                await asyncio.sleep(delay)

    async def _invoke(self, dispatch: Dispatch) -> tuple[str | None, ExecutionError | None]:
        beats = Heartbeats(self, dispatch)
        try:
            fn = await self._function(dispatch)
            ctx = ExecutionContext(
                input=json.loads(dispatch.input_json or "null"),
                execution_id=dispatch.execution_id,
                workflow_name=dispatch.workflow.name,
                worker_name=self.config.name,
                attempt=dispatch.attempt,
                assigned_gpus=dispatch.gpu_indices,
                last_heartbeat=json.loads(dispatch.last_heartbeat_json)
                if dispatch.last_heartbeat_json
                else None,
                _beat=beats,
            )
            if inspect.iscoroutinefunction(fn):
                result = await fn(ctx)
            elif dispatch.timeout > 0 or dispatch.heartbeat_interval > 0:
                # A thread cannot be stopped: a body the server may stop runs in a process we can kill.
                return await in_child(fn, ctx, beats)
            else:
                loop = asyncio.get_running_loop()
                if tracing.ACTIVE:  # the span stays current in the thread
                    result = await loop.run_in_executor(
                        self._threads, contextvars.copy_context().run, fn, ctx
                    )
                else:
                    result = await loop.run_in_executor(self._threads, fn, ctx)
            try:
                return json.dumps(result, allow_nan=False), None
            except (TypeError, ValueError) as exc:
                return None, ExecutionError("TypeError", f"workflow output is not JSON-serialisable: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return None, error_of(exc)
        finally:
            await beats.close()

    async def _deliver(
        self,
        dispatch: Dispatch,
        output_json: str | None,
        error: ExecutionError | None,
        claiming: bool = False,
    ) -> bool:
        """Complete, retrying while the control plane is unreachable: the result exists only here.

        ``claiming``: the result carries the claim, while the server reached takes one so. False
        when the result is refused.
        """
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        while True:
            claim = claiming and self._claims_with_results  # a retry may reach another server
            running = self._running.get(dispatch.execution_id)
            if (
                not claim
                and running is not None
                and running.dispatch is dispatch
                and running.claimed_in != self._streams
            ):
                await self._reclaim(running)  # a result for a dispatch held as unclaimed is refused
            try:
                await self._results.submit(
                    Outcome(dispatch.execution_id, dispatch.generation, output_json, error, claim)
                )
                return True
            except Unavailable as exc:
                delay = backoff.next()
                log.warning(
                    "could not deliver the result of %s (%s); retrying in %.2fs",
                    dispatch.execution_id,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
            except (InvalidArgument, ResourceExhausted) as exc:
                if error is not None:
                    log.warning("error report for %s refused: %s", dispatch.execution_id, exc)
                    return False
                # The output itself was refused (too large, not JSON): report that as the failure,
                # or the execution would stay RUNNING with nobody left to finish it.
                output_json, error = (
                    None,
                    ExecutionError(type(exc).__name__, f"the workflow's output was refused: {exc}"),
                )
            except FluxError as exc:
                log.log(
                    logging.INFO if claiming else logging.WARNING,
                    "result of %s refused: %s",
                    dispatch.execution_id,
                    exc,
                )
                return False

    async def _reclaim(self, running: Running) -> None:
        """Claim again on a new stream (a repeated claim is accepted; a stale one refused)."""
        streams, dispatch = self._streams, running.dispatch
        try:
            await self._claims.submit(ClaimCall(dispatch.execution_id, dispatch.generation))
        except FluxError as exc:  # the result is still delivered, and fenced, as usual
            log.debug("repeated claim of %s not accepted: %s", dispatch.execution_id, exc)
        else:
            running.claimed_in = streams
