"""An asyncio client for ``ControlService``, with the surface of ``flux.client.FluxClient``.

async with FluxClient("127.0.0.1:50051") as client:
    execution = await client.run("hello", "World", wait=True)
    async for done in client.as_completed(await client.map("hello", ["a", "b"])):
        print(done.output_json)

Every method is a coroutine (``watch`` and ``as_completed`` are async iterators); errors are
the same ``flux.errors`` types, and a wait that times out raises ``flux.client.WaitTimedOut``.
One client holds one channel; share it between tasks rather than opening one per call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import grpc

from flux.client.batches import Executions, batch_fields
from flux.client.calls import AsyncCalls
from flux.client.requests import (
    WaitTimedOut,
    chunked,
    encode_inputs,
    execution_ids,
    finished,
    id_chunks,
    in_order,
    rpc_error,
    run_many_request,
    run_request,
    shift_index,
    submit_span,
)
from flux.client.runs import ENDED, LATE, AsyncRunStream, CallEnded, TimedOut
from flux.client.services import AsyncServices
from flux.client.streams import tasks
from flux.defaults import default_server
from flux.domain.batch import check_max_concurrent
from flux.domain.policy import Retry
from flux.errors import FluxError, InvalidArgument, Unavailable
from flux.observe import tracing
from flux.security import Credentials, Role
from flux.v1 import control_pb2, control_pb2_grpc

__all__ = ["FluxClient", "WaitTimedOut"]

Update = Callable[[control_pb2.Execution], None]


class FluxClient(AsyncCalls, AsyncServices):
    def __init__(
        self, address: str | None = None, timeout: float = 30.0, credentials: Credentials | None = None
    ):
        """``credentials`` default to the API token from $FLUX_API_TOKEN or ./.flux/api.token, plaintext."""
        self.address = address or default_server()
        self.timeout = timeout
        self.credentials = credentials or Credentials.for_role(Role.CLIENT)
        self._metadata = self.credentials.metadata
        self._channel = self.credentials.aio_channel(self.address)
        self._stub = control_pb2_grpc.ControlServiceStub(self._channel)
        self._runs = AsyncRunStream(lambda: self._stub.RunAndWaitStream(metadata=self._metadata))
        # ``flux.submit`` spans where this process traces, as the blocking client (checked once).
        self._traced = tracing.adopt()

    async def close(self) -> None:
        await self._runs.close()
        await self._channel.close()

    async def __aenter__(self) -> FluxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _error(self, exc: grpc.RpcError) -> FluxError:
        # The TLS probe behind the hint opens a socket: not on the loop.
        return await asyncio.to_thread(rpc_error, exc, self.address, self.credentials)

    async def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        try:
            return await getattr(self._stub, method)(
                request, timeout=timeout or self.timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise await self._error(exc) from None

    async def _submit(self, method: str, request: Any, workflow: str) -> Any:
        """A submission, in a ``flux.submit`` span whose context the server stores with the executions."""
        if not self._traced:
            return await self._call(method, request)
        attributes = tracing.submit_attributes(self.address, method, workflow)
        with tracing.span("flux.submit", kind="CLIENT", **attributes) as span:
            try:
                answer = await getattr(self._stub, method)(
                    request,
                    timeout=self.timeout,
                    metadata=(*self._metadata, *tracing.metadata(tracing.carrier_of(span))),
                )
            except grpc.RpcError as exc:
                raise await self._error(exc) from None
            tracing.submitted(span, answer)
            return answer

    async def run(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: int = 0,
        wait: bool = False,
        timeout: float | None = None,
        priority: int | None = None,
        attempt_timeout: float | str | None = None,
        retry: Retry | None = None,
        key: str | None = None,
        gang_size: int | None = None,
        after: Iterable[control_pb2.Execution | str] | None = None,
        when: str | None = None,
    ) -> control_pb2.Execution:
        """Submit an execution; with ``wait`` its final state, from the same call (``RunAndWait``).
        ``attempt_timeout`` and ``retry`` override the workflow's for this run (``timeout`` is how
        long this call waits); ``key`` is this run's flow-control key; ``after`` and ``when``: executions
        this run waits for, and how they must end (``"succeeded"``, ``"failed"``, ``"finished"``)."""
        (input_json,) = encode_inputs([input])
        return await self.run_json(
            workflow,
            input_json,
            version=version,
            wait=wait,
            timeout=timeout,
            priority=priority,
            attempt_timeout=attempt_timeout,
            retry=retry,
            key=key,
            gang_size=gang_size,
            after=after,
            when=when,
        )

    async def run_json(
        self,
        workflow: str,
        input_json: str,
        *,
        version: int = 0,
        wait: bool = False,
        timeout: float | None = None,
        priority: int | None = None,
        on_update: Update | None = None,
        attempt_timeout: float | str | None = None,
        retry: Retry | None = None,
        key: str | None = None,
        gang_size: int | None = None,
        after: Iterable[control_pb2.Execution | str] | None = None,
        when: str | None = None,
    ) -> control_pb2.Execution:
        request = run_request(
            workflow, input_json, version, priority, attempt_timeout, retry, key, after, when, gang_size
        )
        if not wait:
            return await self._submit("RunWorkflow", request, workflow)
        return await self._run_and_wait(request, timeout, on_update)

    async def _run_and_wait(
        self, request: control_pb2.RunWorkflowRequest, timeout: float | None, on_update: Update | None
    ) -> control_pb2.Execution:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        if on_update is None and not self._traced:
            # A message on the client's RunAndWaitStream call (a trace or every state is per call);
            # a timeout is the client's to keep, the call stays open (flux/client/runs.py).
            try:
                execution_id, final = await self._runs.run(request, timeout, self.timeout)
            except CallEnded as ended:
                raise (
                    await self._error(ended.error) if ended.error else Unavailable(ENDED.format(self.address))
                ) from None
            except TimedOut as out:
                if out.execution_id is None:
                    raise Unavailable(LATE.format(self.address)) from None
                execution_id, final, deadline = out.execution_id, None, loop.time()
            if final is not None:
                return final
            # Accepted, then the call broke (a restart) or the wait ran out: ``wait`` says which.
            receipt = control_pb2.Execution(execution_id=execution_id)
        else:
            receipt = await self._unary_run_and_wait(request, timeout, on_update)
            if finished(receipt):
                return receipt
        remaining = None if deadline is None else max(0.0, deadline - loop.time())
        try:
            return await self.wait(receipt.execution_id, remaining, on_update)
        except WaitTimedOut as exc:  # named with the whole wait's timeout, not what was left of it
            raise WaitTimedOut(exc.execution, exc.timeout if timeout is None else timeout) from None

    async def _unary_run_and_wait(
        self, request: control_pb2.RunWorkflowRequest, timeout: float | None, on_update: Update | None
    ) -> control_pb2.Execution:
        """A ``RunAndWait`` call of its own: the final state, or the receipt where the call broke
        or the wait's timeout cut it (the caller follows it with ``wait``)."""
        loop = asyncio.get_running_loop()
        # Traced, the submission (to the receipt) is a flux.submit span.
        span, metadata = submit_span(
            self.address, "RunAndWait", request.workflow_name, self._metadata, self._traced
        )
        call = self._stub.RunAndWait(
            control_pb2.RunAndWaitRequest(run=request, every_state=on_update is not None),
            timeout=None if timeout is None else max(timeout, self.timeout),
            metadata=metadata,
        )
        # As the blocking client: the receipt may take as long as any call, the wait's own
        # timeout cuts the stream only once the run is accepted.
        cut: asyncio.TimerHandle | None = None
        receipt = None
        timed_out = False

        def time_out() -> None:
            nonlocal timed_out
            timed_out = True
            call.cancel()

        try:
            async for update in call:
                if receipt is None:
                    receipt = update
                    if span is not None:
                        tracing.submitted(span, update)
                        span.end()
                        span = None
                    if timeout is not None:
                        cut = loop.call_later(timeout, time_out)
                if on_update is not None:
                    on_update(update)
                if finished(update):
                    return update
        except grpc.RpcError as exc:
            error = await self._error(exc)
            if receipt is None or not isinstance(error, Unavailable):
                raise error from None
        except asyncio.CancelledError:
            if not timed_out:
                raise  # our caller cancelled us, not the timer
        finally:
            if span is not None:  # no receipt: refused, or cut off
                span.end()
            if cut is not None:
                cut.cancel()
            call.cancel()
        if receipt is None:
            raise Unavailable(ENDED.format(self.address))
        return receipt

    async def map(
        self,
        workflow: str,
        inputs: Iterable[Any],
        *,
        version: int = 0,
        priority: int | None = None,
        wait: bool = False,
        timeout: float | None = None,
        max_concurrent: int | None = None,
    ) -> Executions:
        """Run ``workflow`` once per input (bulk submission); in input order, as one batch of which
        at most ``max_concurrent`` run at once, as ``FluxClient.map``."""
        if max_concurrent is not None:
            check_max_concurrent(max_concurrent, "max_concurrent")
        executions = await self.run_many_json(
            workflow, encode_inputs(inputs), version=version, priority=priority, batch=True,
            max_concurrent=max_concurrent,
        )  # fmt: skip
        return Executions(await self.wait_all(executions, timeout), executions.batch) if wait else executions

    async def run_many_json(
        self,
        workflow: str,
        inputs_json: Iterable[str],
        *,
        version: int = 0,
        priority: int | None = None,
        key: str | None = None,
        gang_size: int | None = None,
        batch: bool = False,
        max_concurrent: int | None = None,
    ) -> Executions:
        executions: list[control_pb2.Execution] = []
        batch_id = ""
        for chunk in chunked(inputs_json):
            request = run_many_request(workflow, chunk, version, priority, key, gang_size)
            batch_fields(request, batch, max_concurrent, batch_id)
            try:
                answer = await self._submit("RunWorkflows", request, workflow)
            except InvalidArgument as exc:
                raise InvalidArgument(shift_index(str(exc), len(executions))) from None
            executions.extend(answer.executions)
            batch_id = batch_id or answer.batch_id
        return Executions(executions, self.batches.handle(batch_id) if batch_id else None)

    async def wait_all(
        self, executions: Iterable[control_pb2.Execution | str], timeout: float | None = None
    ) -> list[control_pb2.Execution]:
        """The final state of each execution, in the order given, waiting at most ``timeout`` in all."""
        ids = execution_ids(executions)
        return in_order(ids, {e.execution_id: e async for e in self.as_completed(ids, timeout)})

    async def as_completed(
        self, executions: Iterable[control_pb2.Execution | str], timeout: float | None = None
    ) -> AsyncIterator[control_pb2.Execution]:
        """Each execution's final state as it finishes, each once; as ``FluxClient.as_completed``."""
        loop = asyncio.get_running_loop()
        pending = dict.fromkeys(execution_ids(executions))
        deadline = None if timeout is None else loop.time() + timeout
        while pending:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                break
            try:
                async for execution in self._finals(list(pending), remaining):
                    if pending.pop(execution.execution_id, True) is None:
                        yield execution
                return
            except Unavailable:  # the server restarting, or our own deadline passing
                if deadline is not None and loop.time() >= deadline:
                    break
                await asyncio.sleep(0.2)
        assert timeout is not None
        raise WaitTimedOut(await self.get(next(iter(pending)), timeout=5.0), timeout)

    def _finals(self, ids: list[str], timeout: float | None) -> AsyncIterator[control_pb2.Execution]:
        # The merge itself, not a generator around it, so the caller's loop drives it directly.
        calls = [
            self._stub.WaitExecutions(
                control_pb2.WaitExecutionsRequest(execution_ids=chunk),
                timeout=timeout,
                metadata=self._metadata,
            )
            for chunk in id_chunks(ids)
        ]
        return tasks(calls, lambda batch: batch.executions, self._error)

    async def watch(
        self, execution_id: str, timeout: float | None = None
    ) -> AsyncIterator[control_pb2.Execution]:
        """The execution's state now, then every change, ending after a final state."""
        call = self._stub.WatchExecution(
            control_pb2.WatchExecutionRequest(execution_id=execution_id),
            timeout=timeout,
            metadata=self._metadata,
        )
        try:
            async for update in call:
                yield update
        except grpc.RpcError as exc:
            raise await self._error(exc) from None
        finally:
            call.cancel()

    async def wait(
        self, execution_id: str, timeout: float | None = None, on_update: Update | None = None
    ) -> control_pb2.Execution:
        """Follow the execution until a final state, reconnecting if the server restarts meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while deadline is None or loop.time() < deadline:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                async for update in self.watch(execution_id, remaining):
                    if on_update is not None:
                        on_update(update)
                    if finished(update):
                        return update
            except Unavailable:
                if deadline is not None and loop.time() >= deadline:
                    break
                await asyncio.sleep(0.2)
        assert timeout is not None
        current = await self.get(execution_id, timeout=5.0)
        if finished(current):
            return current
        raise WaitTimedOut(current, timeout)
