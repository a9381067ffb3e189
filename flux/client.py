"""A blocking Python client for ``ControlService``, used by the CLI and usable from scripts.

client = FluxClient("127.0.0.1:50051")
client.register_file("examples/hello.py")
execution = client.run("hello", "World", wait=True)
"""

from __future__ import annotations

import functools
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.experimental

from flux import defaults, tracing
from flux.auth import TLS_HINT, Credentials, Role, speaks_tls
from flux.errors import FluxError, InvalidArgument, Unavailable, from_grpc_code
from flux.loader import WorkflowFile, load_workflow_file
from flux.tenant_admin import TenantAdmin
from flux.v1 import control_pb2, control_pb2_grpc, tenants_pb2_grpc

DEFAULT_SERVER = defaults.SERVER
SINGLE_THREADED_STREAMS = grpc.experimental.ChannelOptions.SingleThreadedUnaryStream


def default_server() -> str:
    return os.environ.get("FLUX_SERVER", DEFAULT_SERVER)


class WaitTimedOut(FluxError, TimeoutError):
    """``wait`` gave up at its timeout while the server was answering: the execution is not finished.

    ``execution`` is its state when the wait ended, read from the server then.
    """

    def __init__(self, execution: control_pb2.Execution, timeout: float):
        self.execution, self.timeout = execution, timeout
        state = control_pb2.ExecutionState.Name(execution.state).removeprefix("EXECUTION_STATE_")
        super().__init__(f"timed out after {timeout:g}s; execution {execution.execution_id} is still {state}")


def chunked(
    inputs_json: Iterable[str],
    size: int = defaults.MAX_BATCH_INPUTS,
    max_bytes: int = defaults.RUN_MANY_CHUNK_BYTES,
) -> Iterator[list[str]]:
    """Inputs in RunWorkflows-sized calls: at most ``size`` inputs and (unless one alone is larger) ``max_bytes``."""
    chunk: list[str] = []
    held = 0
    for text in inputs_json:
        if chunk and (len(chunk) >= size or held + len(text) > max_bytes):
            yield chunk
            chunk, held = [], 0
        chunk.append(text)
        held += len(text)
    if chunk:
        yield chunk


def shift_index(message: str, offset: int) -> str:
    # A later call's refusal names the index within its chunk: name it within all the inputs.
    if not offset:
        return message
    return re.sub(
        r"input_json\[(\d+)\]", lambda m: f"input_json[{int(m.group(1)) + offset}]", message, count=1
    )


def rpc_error(exc: grpc.RpcError, address: str, credentials: Credentials) -> FluxError:
    """The domain error a failed call means (``Unavailable`` for an unreachable or silent server)."""
    code, details = exc.code(), exc.details() or ""  # type: ignore[attr-defined]
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Unavailable(f"the Flux server at {address} did not answer in time")
    if code == grpc.StatusCode.UNAVAILABLE:
        hint = ""
        if credentials.ca is None and speaks_tls(address):
            hint = f"; {TLS_HINT}"
        return Unavailable(f"cannot reach the Flux server at {address}: {details or code.name}{hint}")
    return from_grpc_code(code, details)


def workflow_request(loaded: WorkflowFile) -> control_pb2.RegisterWorkflowRequest:
    request = control_pb2.RegisterWorkflowRequest(filename=loaded.path.name, source=loaded.source)
    for wf in loaded.workflows:
        request.workflows.append(
            control_pb2.WorkflowMetadata(
                name=wf.name,
                entrypoint=wf.entrypoint,
                requests=wf.requests.to_proto(),
                affinity=dict(wf.affinity),
                max_attempts=wf.max_attempts,
                priority=wf.priority,
            )
        )
    return request


def execution_ids(executions: Iterable[control_pb2.Execution | str]) -> list[str]:
    """The ids of ``executions`` (executions or ids), in order."""
    return [e if isinstance(e, str) else e.execution_id for e in executions]


def run_request(
    workflow: str, input_json: str, version: int, priority: int | None
) -> control_pb2.RunWorkflowRequest:
    request = control_pb2.RunWorkflowRequest(workflow_name=workflow, input_json=input_json, version=version)
    if priority is not None:
        request.priority = priority
    return request


def encode_inputs(inputs: Iterable[Any]) -> list[str]:
    """Each input as JSON, or ``InvalidArgument`` naming the first that cannot be sent."""
    encoded = []
    for index, value in enumerate(inputs):
        try:
            encoded.append(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"inputs[{index}] cannot be sent as JSON: {exc}") from None
    return encoded


def finished(execution: control_pb2.Execution) -> bool:
    return execution.state >= control_pb2.EXECUTION_STATE_COMPLETED


def in_order(ids: list[str], finals: dict[str, control_pb2.Execution]) -> list[control_pb2.Execution]:
    return [finals[execution_id] for execution_id in ids]


class FluxClient:
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
        # A client records ``flux.submit`` spans where this process traces (OTEL_* settings, or an
        # SDK provider the host set up before making the client); checked once, here.
        self._traced = tracing.adopt()

    @functools.cached_property
    def tenants(self) -> TenantAdmin:
        """Tenants and their tokens (``flux.tenant_admin``; an admin token only)."""
        stub = tenants_pb2_grpc.TenantServiceStub(self._channel)

        def call(method: str, request: Any) -> Any:
            try:
                return getattr(stub, method)(request, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as exc:
                raise self._error(exc) from None

        return TenantAdmin(call)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> FluxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        try:
            return getattr(self._stub, method)(
                request, timeout=timeout or self.timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise self._error(exc) from None

    def _submit_span(self, method: str, workflow: str) -> Any:
        """A started ``flux.submit`` span (not current), for a streamed submission that ends it."""
        return tracing.start(
            "flux.submit", kind="CLIENT", **tracing.submit_attributes(self.address, method, workflow)
        )

    def _submit(self, method: str, request: Any, workflow: str) -> Any:
        """A submission, in a ``flux.submit`` span whose context the server stores with the executions."""
        if not self._traced:
            return self._call(method, request)
        attributes = tracing.submit_attributes(self.address, method, workflow)
        with tracing.span("flux.submit", kind="CLIENT", **attributes) as span:
            try:
                answer = getattr(self._stub, method)(
                    request,
                    timeout=self.timeout,
                    metadata=(*self._metadata, *tracing.metadata(tracing.carrier_of(span))),
                )
            except grpc.RpcError as exc:
                span.set_attribute("rpc.grpc.status_code", exc.code().value[0])  # type: ignore[attr-defined]
                raise self._error(exc) from None
            tracing.submitted(span, answer)
            return answer

    def _error(self, exc: grpc.RpcError) -> FluxError:
        return rpc_error(exc, self.address, self.credentials)

    def register_file(
        self, path: str | Path, allow_import: bool = False
    ) -> control_pb2.RegisterWorkflowResponse:
        """Read the file's workflows without running it, and register them.

        A decorator value that cannot be read from the syntax tree raises ``ValueError`` naming
        ``file:line`` and the argument; ``allow_import=True`` imports the file (running its code)
        to read it instead.
        """
        return self.register(load_workflow_file(path, allow_import=allow_import))

    def register(self, loaded: WorkflowFile) -> control_pb2.RegisterWorkflowResponse:
        return self._call("RegisterWorkflow", workflow_request(loaded))

    def run(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: int = 0,
        wait: bool = False,
        timeout: float | None = None,
        priority: int | None = None,
    ) -> control_pb2.Execution:
        """Submit an execution; with ``wait`` block until it finishes (or ``timeout`` passes).

        ``priority`` (-1000 to 1000, higher first) overrides the workflow's for this run.
        """
        return self.run_json(
            workflow, json.dumps(input), version=version, wait=wait, timeout=timeout, priority=priority
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
    ) -> control_pb2.Execution:
        """``run`` with the input already JSON; ``on_update`` (with ``wait``) sees every state."""
        request = run_request(workflow, input_json, version, priority)
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
        # Traced, the submission (to the receipt) is a flux.submit span, as a run without wait is.
        span = self._submit_span("RunAndWait", request.workflow_name) if self._traced else None
        metadata = (
            self._metadata if span is None else (*self._metadata, *tracing.metadata(tracing.carrier_of(span)))
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
            raise Unavailable(f"the Flux server at {self.address} ended the run without an answer")
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
    ) -> list[control_pb2.Execution]:
        """Run ``workflow`` once per input (bulk submission); the executions in input order.

        Inputs go in RunWorkflows calls of at most 10,000 inputs (and 8 MiB) each; every
        call is one durable commit, so a refused call leaves the earlier calls' executions
        accepted. Each execution is its own, with its own lifecycle. Without ``wait`` the
        executions come back as accepted (ids and states, inputs left out); with ``wait``
        their final states, outputs included, waiting at most ``timeout`` seconds for all of
        them together (``WaitTimedOut`` names the first one not finished by then).
        ``priority`` (-1000 to 1000, higher first) overrides the workflow's for these runs.
        """
        executions = self.run_many_json(workflow, encode_inputs(inputs), version=version, priority=priority)
        return self.wait_all(executions, timeout) if wait else executions

    def run_many_json(
        self, workflow: str, inputs_json: Iterable[str], *, version: int = 0, priority: int | None = None
    ) -> list[control_pb2.Execution]:
        """Submit one execution per JSON-encoded input, in calls of the per-call cap; in input order."""
        executions: list[control_pb2.Execution] = []
        for chunk in chunked(inputs_json):
            request = control_pb2.RunWorkflowsRequest(
                workflow_name=workflow, input_json=chunk, version=version
            )
            if priority is not None:
                request.priority = priority
            try:
                answer = self._submit("RunWorkflows", request, workflow)
            except InvalidArgument as exc:
                raise InvalidArgument(shift_index(str(exc), len(executions))) from None
            executions.extend(answer.executions)
        return executions

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
        chunks = [
            ids[i : i + defaults.MAX_BATCH_INPUTS] for i in range(0, len(ids), defaults.MAX_BATCH_INPUTS)
        ]
        if len(chunks) == 1:
            yield from self._final_stream(chunks[0], timeout)
            return
        # Several streams read side by side, so completion order holds across all of them.
        merged: queue.Queue[control_pb2.Execution | BaseException | None] = queue.Queue()

        def read(chunk: list[str]) -> None:
            try:
                for execution in self._final_stream(chunk, timeout):
                    merged.put(execution)
            except BaseException as exc:
                merged.put(exc)
            merged.put(None)

        for chunk in chunks:
            threading.Thread(target=read, args=(chunk,), name="flux-wait", daemon=True).start()
        open_streams = len(chunks)
        while open_streams:
            item = merged.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item

    def _final_stream(self, ids: list[str], timeout: float | None) -> Iterator[control_pb2.Execution]:
        stream = self._stub.WaitExecutions(
            control_pb2.WaitExecutionsRequest(execution_ids=ids), timeout=timeout, metadata=self._metadata
        )
        try:
            for batch in stream:
                yield from batch.executions
        except grpc.RpcError as exc:
            raise self._error(exc) from None
        finally:
            stream.cancel()

    def get(self, execution_id: str, timeout: float | None = None) -> control_pb2.Execution:
        return self._call("GetExecution", control_pb2.GetExecutionRequest(execution_id=execution_id), timeout)

    def watch(self, execution_id: str, timeout: float | None = None) -> Iterator[control_pb2.Execution]:
        stream = self._stub.WatchExecution(
            control_pb2.WatchExecutionRequest(execution_id=execution_id),
            timeout=timeout,
            metadata=self._metadata,
        )
        try:
            yield from stream
        except grpc.RpcError as exc:
            raise self._error(exc) from None

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

    def cancel(self, execution_id: str) -> control_pb2.Execution:
        return self._call("CancelExecution", control_pb2.CancelExecutionRequest(execution_id=execution_id))

    def workers(self, page_size: int = 1000) -> control_pb2.ListWorkersResponse:
        """Every worker, by name, fetched ``page_size`` at a time (one answer, with every page's workers)."""
        whole = control_pb2.ListWorkersResponse()
        token = ""
        while True:
            page = self._call(
                "ListWorkers", control_pb2.ListWorkersRequest(page_size=page_size, page_token=token)
            )
            whole.workers.extend(page.workers)
            token = page.next_page_token
            if not token:
                return whole

    def forget_worker(self, name: str) -> control_pb2.ForgetWorkerResponse:
        """Drop a worker now: its work is requeued and its name is free."""
        return self._call("ForgetWorker", control_pb2.ForgetWorkerRequest(name=name))

    def explain(self, execution_id: str, timeout: float | None = None) -> control_pb2.Explanation:
        return self._call(
            "ExplainExecution", control_pb2.ExplainExecutionRequest(execution_id=execution_id), timeout
        )

    def list_executions(
        self,
        states: list[int] | tuple[int, ...] = (),
        workflow: str = "",
        worker: str = "",
        created_after_ms: int = 0,
        page_size: int = 0,
        page_token: str = "",
    ) -> control_pb2.ListExecutionsResponse:
        """One page of executions, newest first; pass ``next_page_token`` back for the next."""
        return self._call(
            "ListExecutions",
            control_pb2.ListExecutionsRequest(
                states=states,
                workflow=workflow,
                worker=worker,
                created_after_ms=created_after_ms,
                page_size=page_size,
                page_token=page_token,
            ),  # fmt: skip
        )

    def workflows(self, name: str = "", version: int = 0) -> control_pb2.ListWorkflowsResponse:
        """The latest version of every workflow, or the versions of ``name`` (only ``version``, if given)."""
        return self._call("ListWorkflows", control_pb2.ListWorkflowsRequest(name=name, version=version))

    def pause_worker(self, name: str) -> control_pb2.WorkerInfo:
        return self._call("PauseWorker", control_pb2.PauseWorkerRequest(name=name))

    def resume_worker(self, name: str) -> control_pb2.WorkerInfo:
        return self._call("ResumeWorker", control_pb2.ResumeWorkerRequest(name=name))

    def status(self) -> control_pb2.ClusterStatus:
        """Workers, pending executions by requirement shape, counters and latencies."""
        return self._call("GetStatus", control_pb2.GetStatusRequest())
