"""The clients' calls of one request and one answer: registering workflows, getting, cancelling,
retrying, watching and explaining an execution, building a graph, the listings, the operator's worker calls and the status.
Mixins of the two ``FluxClient`` classes (``Calls`` of sync.py's, ``AsyncCalls`` of aio.py's),
their own module so that sync.py and aio.py keep what differs between them (runs, waits, streams)
and these thin calls sit side by side, the blocking one over its asyncio twin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flux.client.graphs import Graph
from flux.client.requests import list_executions_request, workflow_request
from flux.registration import WorkflowFile, load_workflow_file
from flux.v1 import control_pb2


class Calls:
    """Of ``flux.client.FluxClient``; ``_call``, ``_read`` and ``_submit`` are its own (sync.py)."""

    _call: Callable[..., Any]
    _read: Callable[..., Iterator[Any]]
    _submit: Callable[..., Any]

    def watch(self, execution_id: str, timeout: float | None = None) -> Iterator[control_pb2.Execution]:
        return self._read(
            "WatchExecution", control_pb2.WatchExecutionRequest(execution_id=execution_id), timeout
        )

    def graph(self) -> Graph:
        """A graph of executions that wait for each other, submitted in one call, all or nothing
        (flux/client/graphs.py): ``a = g.add("extract", x); g.add("load", after=[a]); g.submit()``."""
        return Graph(lambda request: self._submit("RunWorkflows", request, "graph"))

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

    def get(self, execution_id: str, timeout: float | None = None) -> control_pb2.Execution:
        return self._call("GetExecution", control_pb2.GetExecutionRequest(execution_id=execution_id), timeout)

    def cancel(self, execution_id: str) -> control_pb2.Execution:
        return self._call("CancelExecution", control_pb2.CancelExecutionRequest(execution_id=execution_id))

    def retry(self, execution_id: str) -> control_pb2.Execution:
        """Start a new attempt of a FAILED execution (its earlier attempts are kept)."""
        return self._call("RetryExecution", control_pb2.RetryExecutionRequest(execution_id=execution_id))

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
        request = list_executions_request(states, workflow, worker, created_after_ms, page_size, page_token)
        return self._call("ListExecutions", request)

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


class AsyncCalls:
    """Of ``flux.aio.FluxClient``; ``_call`` and ``_submit`` are its own (aio.py)."""

    _call: Callable[..., Any]
    _submit: Callable[..., Any]

    def graph(self) -> Graph:
        """As ``FluxClient.graph``; ``await g.submit()``."""
        return Graph(lambda request: self._submit("RunWorkflows", request, "graph"))

    async def register_file(
        self, path: str | Path, allow_import: bool = False
    ) -> control_pb2.RegisterWorkflowResponse:
        """Read the file's workflows without running it, and register them (as ``FluxClient.register_file``:
        ``allow_import=True`` imports a file whose decorators cannot be read)."""
        return await self.register(await asyncio.to_thread(load_workflow_file, path, allow_import))

    async def register(self, loaded: WorkflowFile) -> control_pb2.RegisterWorkflowResponse:
        return await self._call("RegisterWorkflow", workflow_request(loaded))

    async def get(self, execution_id: str, timeout: float | None = None) -> control_pb2.Execution:
        return await self._call(
            "GetExecution", control_pb2.GetExecutionRequest(execution_id=execution_id), timeout
        )

    async def cancel(self, execution_id: str) -> control_pb2.Execution:
        return await self._call(
            "CancelExecution", control_pb2.CancelExecutionRequest(execution_id=execution_id)
        )

    async def retry(self, execution_id: str) -> control_pb2.Execution:
        """Start a new attempt of a FAILED execution (its earlier attempts are kept)."""
        return await self._call(
            "RetryExecution", control_pb2.RetryExecutionRequest(execution_id=execution_id)
        )

    async def workers(self, page_size: int = 1000) -> control_pb2.ListWorkersResponse:
        """Every worker, by name, fetched ``page_size`` at a time (one answer, with every page's workers)."""
        whole = control_pb2.ListWorkersResponse()
        token = ""
        while True:
            page = await self._call(
                "ListWorkers", control_pb2.ListWorkersRequest(page_size=page_size, page_token=token)
            )
            whole.workers.extend(page.workers)
            token = page.next_page_token
            if not token:
                return whole

    async def forget_worker(self, name: str) -> control_pb2.ForgetWorkerResponse:
        return await self._call("ForgetWorker", control_pb2.ForgetWorkerRequest(name=name))

    async def explain(self, execution_id: str, timeout: float | None = None) -> control_pb2.Explanation:
        return await self._call(
            "ExplainExecution", control_pb2.ExplainExecutionRequest(execution_id=execution_id), timeout
        )

    async def list_executions(
        self,
        states: list[int] | tuple[int, ...] = (),
        workflow: str = "",
        worker: str = "",
        created_after_ms: int = 0,
        page_size: int = 0,
        page_token: str = "",
    ) -> control_pb2.ListExecutionsResponse:
        """One page of executions, newest first; pass ``next_page_token`` back for the next."""
        request = list_executions_request(states, workflow, worker, created_after_ms, page_size, page_token)
        return await self._call("ListExecutions", request)

    async def workflows(self, name: str = "", version: int = 0) -> control_pb2.ListWorkflowsResponse:
        return await self._call("ListWorkflows", control_pb2.ListWorkflowsRequest(name=name, version=version))

    async def pause_worker(self, name: str) -> control_pb2.WorkerInfo:
        return await self._call("PauseWorker", control_pb2.PauseWorkerRequest(name=name))

    async def resume_worker(self, name: str) -> control_pb2.WorkerInfo:
        return await self._call("ResumeWorker", control_pb2.ResumeWorkerRequest(name=name))

    async def status(self) -> control_pb2.ClusterStatus:
        return await self._call("GetStatus", control_pb2.GetStatusRequest())
