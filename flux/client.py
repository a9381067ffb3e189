"""A blocking Python client for ``ControlService``, used by the CLI and usable from scripts.

client = FluxClient("127.0.0.1:50051")
client.register_file("examples/hello.py")
execution = client.run("hello", "World", wait=True)
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc

from flux import defaults
from flux.auth import TLS_HINT, Credentials, Role, speaks_tls
from flux.errors import FluxError, InvalidArgument, Unavailable, from_grpc_code
from flux.loader import WorkflowFile, load_workflow_file
from flux.v1 import control_pb2, control_pb2_grpc

DEFAULT_SERVER = defaults.SERVER


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


def _shift_index(message: str, offset: int) -> str:
    # A later call's refusal names the index within its chunk: name it within all the inputs.
    if not offset:
        return message
    return re.sub(
        r"input_json\[(\d+)\]", lambda m: f"input_json[{int(m.group(1)) + offset}]", message, count=1
    )


class FluxClient:
    def __init__(
        self, address: str | None = None, timeout: float = 30.0, credentials: Credentials | None = None
    ):
        """``credentials`` default to the API token from $FLUX_API_TOKEN or ./.flux/api.token, plaintext."""
        self.address = address or default_server()
        self.timeout = timeout
        self.credentials = credentials or Credentials.for_role(Role.CLIENT)
        self._metadata = self.credentials.metadata
        self._channel = self.credentials.channel(self.address)
        self._stub = control_pb2_grpc.ControlServiceStub(self._channel)

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

    def _error(self, exc: grpc.RpcError) -> FluxError:
        code, details = exc.code(), exc.details() or ""  # type: ignore[attr-defined]
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return Unavailable(f"the Flux server at {self.address} did not answer in time")
        if code == grpc.StatusCode.UNAVAILABLE:
            hint = ""
            if self.credentials.ca is None and speaks_tls(self.address):
                hint = f"; {TLS_HINT}"
            return Unavailable(
                f"cannot reach the Flux server at {self.address}: {details or code.name}{hint}"
            )
        return from_grpc_code(code, details)

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
        return self._call("RegisterWorkflow", request)

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
    ) -> control_pb2.Execution:
        request = control_pb2.RunWorkflowRequest(
            workflow_name=workflow, input_json=input_json, version=version
        )
        if priority is not None:
            request.priority = priority
        execution = self._call("RunWorkflow", request)
        return self.wait(execution.execution_id, timeout) if wait else execution

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
        encoded = []
        for index, value in enumerate(inputs):
            try:
                encoded.append(json.dumps(value, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"inputs[{index}] cannot be sent as JSON: {exc}") from None
        executions = self.run_many_json(workflow, encoded, version=version, priority=priority)
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
                answer = self._call("RunWorkflows", request)
            except InvalidArgument as exc:
                raise InvalidArgument(_shift_index(str(exc), len(executions))) from None
            executions.extend(answer.executions)
        return executions

    def wait_all(
        self, executions: Iterable[control_pb2.Execution], timeout: float | None = None
    ) -> list[control_pb2.Execution]:
        """The final state of each execution, in order, waiting at most ``timeout`` seconds in all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        final = []
        for execution in executions:
            remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
            final.append(self.wait(execution.execution_id, remaining))
        return final

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
                    if update.state >= control_pb2.EXECUTION_STATE_COMPLETED:
                        return update
            except Unavailable:  # the server restarting, or our own deadline passing
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
        assert timeout is not None
        # The deadline ended the watch, not the server: say where the execution stands now.
        current = self.get(execution_id, timeout=5.0)
        if current.state >= control_pb2.EXECUTION_STATE_COMPLETED:
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
