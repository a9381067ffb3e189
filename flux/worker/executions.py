"""One execution on the worker once its dispatch arrives: claim it and, meanwhile, call the workflow's
function (fetching its code), then deliver the result, and the spans around them. ``WorkerRuntime``
holds the state these read. Sending the claim and the result (delivery.py), pending claims
(claims.py), heartbeats (heartbeats.py) and a body in its own process (child_runner.py) are their
own modules."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from flux.context import ExecutionContext
from flux.domain.execution import ExecutionError
from flux.observe import tracing
from flux.worker.child_runner import in_child
from flux.worker.claims import CLAIM_DELAY, PendingClaim
from flux.worker.code_cache import CodeCache
from flux.worker.delivery import Delivery
from flux.worker.heartbeats import Heartbeats
from flux.worker.prefetch import ResultsInFlight, after_results
from flux.worker.transport import Dispatch


def error_of(exc: BaseException) -> ExecutionError:
    """The error a body raised, with its bases' names (a retry policy's names match those too)."""
    bases = tuple(k.__name__ for k in type(exc).__mro__[1:] if k is not object)
    return ExecutionError(type(exc).__qualname__, str(exc), traceback.format_exc(), bases)


class Executions(Delivery):
    """The part of ``WorkerRuntime`` that takes one execution from its claim to its result."""

    # Set by WorkerRuntime.__init__ (with Delivery's own).
    _threads: ThreadPoolExecutor
    _code: CodeCache
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
