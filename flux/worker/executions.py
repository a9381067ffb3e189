"""One execution on the worker once its dispatch arrives: claim it and, meanwhile, call the workflow's
function (fetching its code), deliver the result, each retried while the control plane is unreachable,
and the spans around them. ``WorkerRuntime`` holds the state these read; ``Backoff`` (backoff.py) is the
delay between tries. Claims (claims.py), heartbeats (heartbeats.py) and a body in its own process
(child_runner.py) are their own modules."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
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
from flux.worker.backoff import Backoff
from flux.worker.batching import Batcher
from flux.worker.child_runner import in_child
from flux.worker.claims import CLAIM_DELAY, ClaimCall, PendingClaim, Running
from flux.worker.code_cache import CodeCache
from flux.worker.heartbeats import Heartbeats
from flux.worker.prefetch import ResultsInFlight, after_results
from flux.worker.transport import Dispatch, Outcome

T = TypeVar("T")

log = logging.getLogger("flux.worker")


def error_of(exc: BaseException) -> ExecutionError:
    """The error a body raised, with its bases' names (a retry policy's names match those too)."""
    bases = tuple(k.__name__ for k in type(exc).__mro__[1:] if k is not object)
    return ExecutionError(type(exc).__qualname__, str(exc), traceback.format_exc(), bases)


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
    _in_flight: ResultsInFlight

    async def _release(self, execution_id: str, generation: int, reason: str) -> None:
        raise NotImplementedError

    async def _heartbeat(self, execution_id: str, generation: int, details_json: str) -> None:
        raise NotImplementedError

    def _room_freed(self) -> None:  # start what waits in our own queue if it fits now (runtime.py)
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
        running = self._running.get(execution_id)
        after = running.after if running is not None and running.dispatch is dispatch else ()
        sent: asyncio.Future[None] | None = None  # its result's, once its body has ended

        def send() -> asyncio.Task[bool]:
            task = asyncio.create_task(
                after_results(
                    after,
                    lambda: (
                        self._traced_claim(dispatch, written) if traced else self._claim(dispatch, written)
                    ),
                )
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
                sent = self._body_ended(dispatch)
                with tracing.span("flux.complete", dispatch.trace, "CLIENT", **self._span_fields(dispatch)):
                    await self._complete(dispatch, claim.settle(), written, output_json, error)
            else:
                output_json, error = await self._invoke(dispatch)
                sent = self._body_ended(dispatch)
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
            if sent is not None:
                self._in_flight.end(sent)
            running = self._running.get(execution_id)
            if running is not None and running.dispatch is dispatch:  # not a newer dispatch of it
                del self._running[execution_id]
                self._room_freed()

    def _body_ended(self, dispatch: Dispatch) -> asyncio.Future[None]:
        """Its room is free now, not once its result is answered: our queue may start its next (after
        this turn, so the result reaches the batcher first and is sent ahead of that one's claim)."""
        running = self._running.get(dispatch.execution_id)
        if running is not None and running.dispatch is dispatch:
            running.body_ended = True
            asyncio.get_running_loop().call_soon(self._room_freed)
        return self._in_flight.begin()

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
        beats = Heartbeats(self._heartbeat, dispatch)
        try:
            fn = await self._function(dispatch)
            ctx = ExecutionContext(
                input=json.loads(dispatch.input_json or "null"),
                execution_id=dispatch.execution_id,
                workflow_name=dispatch.workflow.name,
                worker_name=self.config.name,
                attempt=dispatch.attempt,
                assigned_gpus=dispatch.gpu_indices,
                gang=dispatch.gang,
                last_heartbeat=json.loads(dispatch.last_heartbeat_json)
                if dispatch.last_heartbeat_json
                else None,
                upstream={key: json.loads(output or "null") for key, output in dispatch.upstream},
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
        when the result is refused. One refused as unclaimed claims, then is sent once more: after a
        restart our claim may have come before the server held our stream (else RUNNING for good).
        """
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        claimed_again = claiming
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
                if isinstance(exc, FailedPrecondition) and not claimed_again:
                    claimed_again = True
                    if await self._claim(dispatch):  # refused if not ours (a stale generation)
                        continue
                level = logging.INFO if claiming else logging.WARNING
                log.log(level, "result of %s refused: %s", dispatch.execution_id, exc)
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
