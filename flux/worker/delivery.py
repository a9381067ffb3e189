"""What a worker tells the server about one execution: its claim and its result, each retried
while the control plane is unreachable. A result refused as unclaimed claims once more and is sent
again; a claim refused means the execution was never ours. ``Executions`` (executions.py) runs the
body between the two."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

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
from flux.worker.backoff import Backoff
from flux.worker.batching import Batcher
from flux.worker.claims import ClaimCall, Running
from flux.worker.transport import Dispatch, Outcome

T = TypeVar("T")

log = logging.getLogger("flux.worker")


class _Config(Protocol):
    """What of ``WorkerConfig`` a delivery reads (that module imports this one)."""

    @property
    def name(self) -> str: ...
    @property
    def backoff_initial(self) -> float: ...
    @property
    def backoff_max(self) -> float: ...


class Delivery:
    """The part of ``WorkerRuntime`` that sends an execution's claim and its result."""

    # Set by WorkerRuntime.__init__ (and the stream count by its session).
    config: _Config
    _streams: int
    _running: dict[str, Running]
    _claims: Batcher[ClaimCall]
    _results: Batcher[Outcome]
    _claims_with_results: bool

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
