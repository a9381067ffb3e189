"""A blocking Python client for ``ControlService``, used by the CLI and usable from scripts.

client = FluxClient("127.0.0.1:50051")
client.register_file("examples/hello.py")
execution = client.run("hello", "World", wait=True)
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc
import grpc.experimental

from flux.client.batches import Executions, batch_fields
from flux.client.calls import Calls

# ``chunked`` and ``WaitTimedOut`` are imported from here outside flux (tests, bench, scripts).
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
from flux.client.runs import ENDED, LATE, CallEnded, RunStream, TimedOut
from flux.client.services import Services
from flux.client.streams import threaded
from flux.defaults import default_server
from flux.domain.batch import check_max_concurrent
from flux.domain.policy import Retry
from flux.errors import FluxError, InvalidArgument, Unavailable
from flux.observe import tracing
from flux.security import Credentials, Role
from flux.v1 import control_pb2, control_pb2_grpc

__all__ = ["FluxClient", "WaitTimedOut", "chunked"]

SINGLE_THREADED_STREAMS = grpc.experimental.ChannelOptions.SingleThreadedUnaryStream


class FluxClient(Calls, Services):
    def __init__(
        self, address: str | None = None, timeout: float = 30.0, credentials: Credentials | None = None
    ):
        """``credentials`` default to the API token from $FLUX_API_TOKEN or ./.flux/api.token, plaintext."""
        self.address = address or default_server()
        self.timeout = timeout
        self.credentials = credentials or Credentials.for_role(Role.CLIENT)
        self._metadata = self.credentials.metadata
        # Each stream (RunAndWait, WaitExecutions, watch) is read by the thread that iterates it.
        # By default grpc starts a thread to poll every stream a channel opens while none is open
        # (so once per run(wait=True) called in a loop): a third of the client's CPU per run.
        self._channel = self.credentials.channel(self.address, [(SINGLE_THREADED_STREAMS, 1)])
        self._stub = control_pb2_grpc.ControlServiceStub(self._channel)
        stub, metadata = self._stub, self._metadata  # not self: a client dropped unclosed is collected
        self._runs = RunStream(lambda requests: stub.RunAndWaitStream(requests, metadata=metadata))
        weakref.finalize(self, self._runs.close)  # and ends its call (the reader thread holds that)
        # A client records ``flux.submit`` spans where this process traces (OTEL_* settings, or an
        # SDK provider the host set up before making the client); checked once, here.
        self._traced = tracing.adopt()

    def close(self) -> None:
        self._runs.close()
        self._channel.close()

    def __enter__(self) -> FluxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any, timeout: float | None = None, stub: Any = None) -> Any:
        try:
            return getattr(stub or self._stub, method)(
                request, timeout=timeout or self.timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise self._error(exc) from None

    def _read(self, method: str, request: Any, timeout: float | None) -> Iterator[Any]:
        """A server stream's messages, its errors as ``FluxError``; the call ends when the reader stops."""
        stream = getattr(self._stub, method)(request, timeout=timeout, metadata=self._metadata)
        try:
            yield from stream
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        finally:
            stream.cancel()

    def _submit(self, method: str, request: Any, workflow: str) -> Any:
        """A submission, in a ``flux.submit`` span whose context the server stores with the executions."""
        if not self._traced:
            return self._call(method, request)
        with tracing.span(
            "flux.submit", kind="CLIENT", **tracing.submit_attributes(self.address, method, workflow)
        ) as span:
            metadata = (*self._metadata, *tracing.metadata(tracing.carrier_of(span)))
            try:
                answer = getattr(self._stub, method)(request, timeout=self.timeout, metadata=metadata)
            except grpc.RpcError as exc:
                span.set_attribute("rpc.grpc.status_code", exc.code().value[0])  # type: ignore[attr-defined]
                raise self._error(exc) from None
            tracing.submitted(span, answer)
            return answer

    def _error(self, exc: grpc.RpcError) -> FluxError:
        return rpc_error(exc, self.address, self.credentials)

    def run(
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
        """Submit an execution; with ``wait`` block until it finishes (or ``timeout`` passes).

        ``priority`` (-1000 to 1000, higher first) overrides the workflow's for this run, as do
        ``attempt_timeout`` (one attempt's limit: ``"10m"`` or seconds) and ``retry``. ``timeout``
        is how long this call waits, not a limit on the execution. ``key``: this run's flow-control
        key, in place of the input's; ``after``/``when``: what it waits for and how (ctx.upstream).
        """
        return self.run_json(
            workflow,
            json.dumps(input),
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

    def run_json(
        self,
        workflow: str,
        input_json: str,
        *,
        version: int = 0,
        wait: bool = False,
        timeout: float | None = None,
        priority: int | None = None,
        on_update: Callable[[control_pb2.Execution], None] | None = None,
        attempt_timeout: float | str | None = None,
        retry: Retry | None = None,
        key: str | None = None,
        gang_size: int | None = None,
        after: Iterable[control_pb2.Execution | str] | None = None,
        when: str | None = None,
    ) -> control_pb2.Execution:
        """``run`` with the input already JSON; ``on_update`` (with ``wait``) sees every state."""
        request = run_request(
            workflow, input_json, version, priority, attempt_timeout, retry, key, after, when, gang_size
        )
        if not wait:
            return self._submit("RunWorkflow", request, workflow)
        return self._run_and_wait(request, timeout, on_update)

    def _run_and_wait(
        self,
        request: control_pb2.RunWorkflowRequest,
        timeout: float | None,
        on_update: Callable[[control_pb2.Execution], None] | None,
    ) -> control_pb2.Execution:
        # One call: the receipt, then the final state. The receipt may take as long as any
        # call (self.timeout); the wait's own timeout cuts the stream only once it is accepted.
        deadline = None if timeout is None else time.monotonic() + timeout
        if on_update is None and not self._traced:
            # A message on the client's RunAndWaitStream call (a trace or every state is per call);
            # a timeout is the client's to keep, the call stays open (flux/client/runs.py).
            try:
                execution_id, final = self._runs.run(request, timeout, self.timeout)
            except CallEnded as ended:
                raise (
                    self._error(ended.error) if ended.error else Unavailable(ENDED.format(self.address))
                ) from None
            except TimedOut as out:
                if out.execution_id is None:
                    raise Unavailable(LATE.format(self.address)) from None
                execution_id, final, deadline = out.execution_id, None, time.monotonic()
            if final is not None:
                return final
            # Accepted, then the call broke (a restart) or the wait ran out: ``wait`` says which.
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return self.wait(execution_id, remaining)
            except WaitTimedOut as exc:  # named with the whole wait's timeout
                raise WaitTimedOut(exc.execution, exc.timeout if timeout is None else timeout) from None
        # Traced, the submission (to the receipt) is a flux.submit span, as a run without wait is.
        span, metadata = submit_span(
            self.address, "RunAndWait", request.workflow_name, self._metadata, self._traced
        )
        stream = self._stub.RunAndWait(
            control_pb2.RunAndWaitRequest(run=request, every_state=on_update is not None),
            timeout=None if timeout is None else max(timeout, self.timeout),
            metadata=metadata,
        )
        timer = None if timeout is None else threading.Timer(timeout, stream.cancel)
        receipt = None
        try:
            for update in stream:
                if receipt is None:
                    receipt = update
                    if span is not None:
                        tracing.submitted(span, update)
                        span.end()
                        span = None
                    if timer is not None:
                        timer.start()
                if on_update is not None:
                    on_update(update)
                if finished(update):
                    # Read the call's end too (it follows at once): a call dropped unfinished is
                    # cancelled as it is collected, a reset that costs both sides more than the read.
                    next(stream, None)
                    return update
        except grpc.RpcError as exc:
            error = self._error(exc)
            if span is not None:
                span.set_attribute("error.type", type(error).__name__)
            if receipt is None or not isinstance(error, Unavailable):
                raise error from None
        finally:
            if span is not None:
                span.end()
            if timer is not None:
                timer.cancel()
        if receipt is None:
            raise Unavailable(ENDED.format(self.address))
        # Accepted, then the stream broke (a restart, or the timeout): follow it as ``wait`` does.
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return self.wait(receipt.execution_id, remaining, on_update)
        except WaitTimedOut as exc:  # named with the whole wait's timeout, not what was left of it
            raise WaitTimedOut(exc.execution, exc.timeout if timeout is None else timeout) from None

    def map(
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
        """Run ``workflow`` once per input (bulk submission); the executions in input order, as one
        batch (``.batch_id``, ``.batch``: flux/client/batches.py) of which at most ``max_concurrent``
        run at once (None: no limit).

        Inputs go in RunWorkflows calls of at most 10,000 inputs (and 8 MiB) each; every
        call is one durable commit, so a refused call leaves the earlier calls' executions
        accepted. Each execution is its own, with its own lifecycle. Without ``wait`` the
        executions come back as accepted (ids and states, inputs left out); with ``wait``
        their final states, outputs included, waiting at most ``timeout`` seconds for all of
        them together (``WaitTimedOut`` names the first one not finished by then).
        ``priority`` (-1000 to 1000, higher first) overrides the workflow's for these runs.
        """
        if max_concurrent is not None:
            check_max_concurrent(max_concurrent, "max_concurrent")
        executions = self.run_many_json(
            workflow, encode_inputs(inputs), version=version, priority=priority, batch=True,
            max_concurrent=max_concurrent,
        )  # fmt: skip
        return Executions(self.wait_all(executions, timeout), executions.batch) if wait else executions

    def run_many_json(
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
        """Submit one execution per JSON-encoded input, in calls of the per-call cap; in input order.
        ``batch`` or ``max_concurrent``: as one batch (the first call makes it, the others join it)."""
        executions: list[control_pb2.Execution] = []
        batch_id = ""
        for chunk in chunked(inputs_json):
            request = run_many_request(workflow, chunk, version, priority, key, gang_size)
            batch_fields(request, batch, max_concurrent, batch_id)
            try:
                answer = self._submit("RunWorkflows", request, workflow)
            except InvalidArgument as exc:
                raise InvalidArgument(shift_index(str(exc), len(executions))) from None
            executions.extend(answer.executions)
            batch_id = batch_id or answer.batch_id
        return Executions(executions, self.batches.handle(batch_id) if batch_id else None)

    def wait_all(
        self, executions: Iterable[control_pb2.Execution | str], timeout: float | None = None
    ) -> list[control_pb2.Execution]:
        """The final state of each execution, in the order given, waiting at most ``timeout`` seconds in all.

        One ``WaitExecutions`` stream per 10,000 executions, not one call each.
        """
        ids = execution_ids(executions)
        return in_order(ids, {e.execution_id: e for e in self.as_completed(ids, timeout)})

    def as_completed(
        self, executions: Iterable[control_pb2.Execution | str], timeout: float | None = None
    ) -> Iterator[control_pb2.Execution]:
        """Each execution's final state as it finishes (those already finished first), each once.

        ``executions`` are executions or their ids. The server streams them (``WaitExecutions``,
        10,000 ids a stream, streams read side by side); a server restart meanwhile is ridden out
        by asking again for those not yet seen. At ``timeout`` seconds in all raises
        ``WaitTimedOut`` with the first one not finished, as it is then.
        """
        pending = dict.fromkeys(execution_ids(executions))
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            try:
                for execution in self._finals(list(pending), remaining):
                    if pending.pop(execution.execution_id, True) is None:
                        yield execution
                return
            except Unavailable:  # the server restarting, or our own deadline passing
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
        assert timeout is not None
        current = self.get(next(iter(pending)), timeout=5.0)
        raise WaitTimedOut(current, timeout)

    def _finals(self, ids: list[str], timeout: float | None) -> Iterator[control_pb2.Execution]:
        return threaded([self._final_stream(chunk, timeout) for chunk in id_chunks(ids)], "flux-wait")

    def _final_stream(self, ids: list[str], timeout: float | None) -> Iterator[control_pb2.Execution]:
        for batch in self._read(
            "WaitExecutions", control_pb2.WaitExecutionsRequest(execution_ids=ids), timeout
        ):
            yield from batch.executions

    def wait(
        self,
        execution_id: str,
        timeout: float | None = None,
        on_update: Callable[[control_pb2.Execution], None] | None = None,
    ) -> control_pb2.Execution:
        """Follow the execution until a final state, reconnecting if the server restarts meanwhile.

        ``on_update`` sees every state the watch reports. At ``timeout`` raises ``WaitTimedOut``
        with the execution as the server holds it then (``Unavailable`` if it cannot be asked).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                for update in self.watch(execution_id, remaining):
                    if on_update is not None:
                        on_update(update)
                    if finished(update):
                        return update
            except Unavailable:  # the server restarting, or our own deadline passing
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
        assert timeout is not None
        # The deadline ended the watch, not the server: say where the execution stands now.
        current = self.get(execution_id, timeout=5.0)
        if finished(current):
            return current  # it finished just as we gave up
        raise WaitTimedOut(current, timeout)
