"""The client-facing gRPC service (runs, watches, listings, the fleet): convert, call the
dispatcher, convert back, within what the calling tenant may see.

Errors become status codes through ``flux.errors.STATUS`` only, by way of
``flux.server.answers``: domain errors as they are, the store's "database unreachable"
as UNAVAILABLE, anything else INTERNAL (``flux.errors.refusal``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
from collections.abc import AsyncIterator, Callable

import grpc

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.reads import waiting
from flux.dispatcher.reads.listing import execution_query, page_token
from flux.dispatcher.reads.worker_pages import worker_page
from flux.dispatcher.state.tenants import OPERATOR, Caller
from flux.domain.execution import Execution
from flux.errors import InvalidArgument, NotFound, Unauthenticated
from flux.observe import tracing
from flux.observe.status import StatusBoard
from flux.security import bearer
from flux.server import convert, fleet_watch, run_convert
from flux.server.answers import abort, call_refused, unary
from flux.server.bulk_answer import bulk_answer, graph_answer
from flux.server.callers import Callers
from flux.server.metadata import CALLER_ROLE, CALLER_TENANT
from flux.server.multiplexed import multiplexed
from flux.v1 import control_pb2, control_pb2_grpc

# GetMetrics may answer from a snapshot up to this old (seconds): it is open to
# callers without a token, and a snapshot is O(unfinished + shapes x workers).
METRICS_MAX_AGE = 1.0

# Runs one RunAndWaitStream call may have waiting at once (as many ids as one WaitExecutions);
# reading the next waits for one to finish.
RUNS_IN_FLIGHT = 10_000
# A RunAndWaitStream run whose receipt may wait this long (receipt_after_ms) is queued before its
# row is written (submission.submit's ``written_later``): one write instead of two when it ends
# sooner. A longer wait writes it first, so a run is never unwritten for longer than this.
WRITTEN_LATER_MAX = 0.05


class ControlService(control_pb2_grpc.ControlServiceServicer):
    """Each call speaks for a tenant (``callers``): a token other than a cluster admin's sees and changes its tenant's only.

    Another tenant's execution is answered as one that does not exist: an id tells nobody
    whether it is in use.
    """

    def __init__(self, dispatcher: Dispatcher, callers: Callers | None = None, metrics_token: str = ""):
        self.dispatcher = dispatcher
        self.status = StatusBoard(dispatcher)
        self.callers = callers
        self.metrics_token = metrics_token

    async def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        return OPERATOR if self.callers is None else await self.callers.of(context)

    async def _visible(self, execution_id: str, context: grpc.aio.ServicerContext) -> Execution:
        """The execution, when the caller may see it; NotFound otherwise."""
        caller = await self._caller(context)
        execution = await self.dispatcher.get(execution_id)
        if not caller.sees(execution):
            raise NotFound(f"execution {execution_id!r} does not exist")
        return execution

    @unary()
    async def RegisterWorkflow(
        self, request: control_pb2.RegisterWorkflowRequest, context: grpc.aio.ServicerContext
    ):
        caller = await self._caller(context)
        stored = await self.dispatcher.register_workflows(
            request.filename, request.source, convert.workflows_from_proto(request), tenant=caller.tenant
        )
        await self.dispatcher.audit.record(
            caller, "workflow.register", ",".join(r.name for r in stored), caller.tenant,
            filename=request.filename, versions={r.name: r.version for r in stored},
            unchanged=[r.name for r in stored if r.unchanged],
        )  # fmt: skip
        return control_pb2.RegisterWorkflowResponse(
            workflows=[
                control_pb2.RegisteredWorkflow(
                    name=r.name, version=r.version, source_hash=r.source_hash, unchanged=r.unchanged
                )
                for r in stored
            ]
        )

    @unary()
    async def RunWorkflow(self, request: control_pb2.RunWorkflowRequest, context: grpc.aio.ServicerContext):
        priority = request.priority if request.HasField("priority") else None
        caller = await self._caller(context)
        execution = await self.dispatcher.submit(
            request.workflow_name,
            request.input_json,
            request.version,
            priority,
            tracing.from_pairs(context.invocation_metadata()),
            tenant=caller.tenant,
            every_workflow=caller.cluster_admin,
            overrides=run_convert.run_overrides(request)._replace(sees=caller.sees),
        )
        return convert.execution_to_proto(execution)

    @unary()
    async def RunWorkflows(self, request: control_pb2.RunWorkflowsRequest, context: grpc.aio.ServicerContext):
        priority = request.priority if request.HasField("priority") else None
        caller = await self._caller(context)
        if request.items:
            return graph_answer(await self._graph(request, context, caller))
        executions = await self.dispatcher.submit_many(
            request.workflow_name,
            list(request.input_json),
            request.version,
            priority,
            tracing.from_pairs(context.invocation_metadata()),
            tenant=caller.tenant,
            every_workflow=caller.cluster_admin,
            overrides=run_convert.run_overrides(request)._replace(sees=caller.sees),
            batch=run_convert.batch_ask(request),
        )
        # Without their inputs: the caller sent them, and echoing them could pass the message cap.
        return bulk_answer(executions, executions[0].batch_id)

    async def _graph(
        self, request: control_pb2.RunWorkflowsRequest, context: grpc.aio.ServicerContext, caller: Caller
    ) -> list[Execution]:
        """RunWorkflows with items: a graph, all or nothing (transitions/graphs.py)."""
        shared = [
            n
            for n in ("priority", "attempt_timeout_s", "retry", "key", "max_concurrent")
            if request.HasField(n)
        ]
        shared += [
            n
            for n in ("workflow_name", "input_json", "version", "after", "when", "batch", "batch_id")
            if getattr(request, n)
        ]
        if shared:
            raise InvalidArgument(
                f"items is set: give each item its own fields, not {', '.join(shared)} on the call"
            )
        return await self.dispatcher.submit_graph(
            run_convert.graph_items_from_proto(request.items),
            tracing.from_pairs(context.invocation_metadata()),
            tenant=caller.tenant,
            every_workflow=caller.cluster_admin,
            sees=caller.sees,
        )

    @unary()
    async def GetExecution(self, request: control_pb2.GetExecutionRequest, context: grpc.aio.ServicerContext):
        return convert.execution_to_proto(await self._visible(request.execution_id, context))

    async def WatchExecution(
        self, request: control_pb2.WatchExecutionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[control_pb2.Execution]:
        try:
            await self._visible(request.execution_id, context)
            async for execution in self.dispatcher.watch(request.execution_id):
                yield convert.execution_to_proto(execution)
        except Exception as exc:
            await abort(self.dispatcher, context, exc)

    async def RunAndWait(
        self, request: control_pb2.RunAndWaitRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[control_pb2.Execution]:
        run = request.run
        priority = run.priority if run.HasField("priority") else None
        try:
            caller = await self._caller(context)
            accepted = await self.dispatcher.submit(
                run.workflow_name,
                run.input_json,
                run.version,
                priority,
                tracing.from_pairs(context.invocation_metadata()),
                tenant=caller.tenant,
                every_workflow=caller.cluster_admin,
                overrides=run_convert.run_overrides(run)._replace(sees=caller.sees),
            )
            yield convert.execution_to_proto(accepted)
            if request.every_state:
                async for execution in self.dispatcher.watch(accepted.execution_id):
                    if execution.moved_from(accepted):
                        accepted = execution
                        yield convert.execution_to_proto(execution.evolve(input_json=""))
            else:
                done = await waiting.final(self.dispatcher, accepted.execution_id, accepted)
                yield convert.execution_to_proto(done)
        except Exception as exc:
            await abort(self.dispatcher, context, exc)

    async def RunAndWaitStream(
        self, requests: AsyncIterator[control_pb2.RunAndWaitStreamRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[control_pb2.RunAndWaitStreamResponse]:
        """RunAndWait for each request message, answered under its run_id; a run's refusal is an
        answer, and only a refusal of the whole call (its token) ends the stream."""
        try:
            caller = await self._caller(context)
        except Exception as exc:
            await abort(self.dispatcher, context, exc)
        trace = tracing.from_pairs(context.invocation_metadata())
        Answer = control_pb2.RunAndWaitStreamResponse

        async def run_and_wait(
            request: control_pb2.RunAndWaitStreamRequest, answer: Callable[[Answer], None]
        ):
            run, run_id = request.run, request.run_id
            try:
                receipt_after = run_convert.receipt_after(request)
                accepted = await self.dispatcher.submit(
                    run.workflow_name,
                    run.input_json,
                    run.version,
                    run.priority if run.HasField("priority") else None,
                    trace,
                    tenant=caller.tenant,
                    every_workflow=caller.cluster_admin,
                    overrides=run_convert.run_overrides(run)._replace(sees=caller.sees),
                    # Told of only by its final state, or by a receipt sent once it is written.
                    written_later=0 < receipt_after <= WRITTEN_LATER_MAX,
                )
                done = await waiting.final_with_receipt(
                    self.dispatcher,
                    accepted.execution_id,
                    accepted,
                    lambda: answer(Answer(run_id=run_id, accepted=convert.execution_to_proto(accepted))),
                    receipt_after,
                )
                answer(Answer(run_id=run_id, finished=convert.execution_to_proto(done)))
            except Exception as exc:
                answer(Answer(run_id=run_id, refused=call_refused(self.dispatcher, exc)))

        async for answer in multiplexed(requests, run_and_wait, RUNS_IN_FLIGHT):
            yield answer

    async def WaitExecutions(
        self, request: control_pb2.WaitExecutionsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[control_pb2.FinishedExecutions]:
        try:
            caller = await self._caller(context)
            # Visibility with existence, id by id: [another tenant's, a missing one] is refused
            # naming the first, exactly as [missing, missing] would be.
            executions = await waiting.known(self.dispatcher, request.execution_ids, caller.sees)
            # Headers now: a gateway relaying this as SSE answers 200 once the ids are accepted,
            # before the first execution finishes (a refusal has no headers, only its status).
            await context.send_initial_metadata(())
            async for batch in waiting.finals(self.dispatcher, executions):
                yield control_pb2.FinishedExecutions(
                    executions=[convert.execution_to_proto(e) for e in batch]
                )
        except Exception as exc:
            await abort(self.dispatcher, context, exc)

    async def WatchFleet(
        self, request: control_pb2.WatchFleetRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[control_pb2.FleetEvent]:
        # Closed with this call (a client gone): its subscription ends now, not when collected.
        watch = fleet_watch.watch(self.dispatcher, await self._caller(context), context)
        async with contextlib.aclosing(watch):
            async for event in watch:
                yield event

    @unary()
    async def CancelExecution(
        self, request: control_pb2.CancelExecutionRequest, context: grpc.aio.ServicerContext
    ):
        await self._visible(request.execution_id, context)
        return convert.execution_to_proto(await self.dispatcher.cancel(request.execution_id))

    @unary()
    async def RetryExecution(
        self, request: control_pb2.RetryExecutionRequest, context: grpc.aio.ServicerContext
    ):
        await self._visible(request.execution_id, context)
        return convert.execution_to_proto(await self.dispatcher.retry(request.execution_id))

    @unary()
    async def ListWorkers(self, request: control_pb2.ListWorkersRequest, context: grpc.aio.ServicerContext):
        workers = sorted(await self.dispatcher.fleet_workers(), key=lambda w: w.name)
        page, following = worker_page(
            workers, [w.name for w in workers], request.page_size, request.page_token
        )
        # Only the page is converted: at 10,000 workers converting them all was most of a listing's cost.
        return control_pb2.ListWorkersResponse(
            workers=[convert.worker_to_proto(w) for w in page], next_page_token=following
        )

    @unary()
    async def ExplainExecution(
        self, request: control_pb2.ExplainExecutionRequest, context: grpc.aio.ServicerContext
    ):
        await self._visible(request.execution_id, context)
        caller = await self._caller(context)
        # caller.scope: "" for a cluster admin (every tenant named), else the tenant it speaks for.
        return convert.why_to_proto(await self.dispatcher.why(request.execution_id, caller.scope))

    @unary()
    async def ForgetWorker(self, request: control_pb2.ForgetWorkerRequest, context: grpc.aio.ServicerContext):
        requeued = await self.dispatcher.forget_worker(request.name)
        await self.dispatcher.audit.record(
            await self._caller(context), "worker.forget", request.name, requeued=requeued
        )
        return control_pb2.ForgetWorkerResponse(requeued=requeued)

    @unary()
    async def GetStatus(self, request: control_pb2.GetStatusRequest, context: grpc.aio.ServicerContext):
        caller = await self._caller(context)
        # Who the token speaks for, beside the answer (ClusterStatus is the same for every caller but
        # for what the block below leaves out): the gateway passes it on as X-Flux-Tenant and
        # X-Flux-Role, which is how the dashboard knows whether it speaks for every tenant or one.
        context.set_trailing_metadata(((CALLER_TENANT, caller.tenant), (CALLER_ROLE, caller.role)))
        # A tenant's token gets its own tenant's pending rows only (each names an execution and a
        # workflow); the fleet and the counts are everyone's to see.
        status = convert.status_to_proto(await self.status.snapshot(detail=True, scope=caller.scope))
        if not caller.cluster_admin:
            # Another tenant's usage is not for it to read either (a cluster admin sees every tenant's).
            own = [t for t in status.tenants if t.name == caller.tenant]
            del status.tenants[:]
            status.tenants.extend(own)
        return status

    @unary()
    async def ListExecutions(
        self, request: control_pb2.ListExecutionsRequest, context: grpc.aio.ServicerContext
    ):
        query = execution_query(
            request.states, request.workflow, request.worker, request.created_after_ms,
            request.page_size, request.page_token,
        )  # fmt: skip
        caller = await self._caller(context)
        query = dataclasses.replace(query, tenant=caller.scope)
        executions, following = await self.dispatcher.list_executions(query)
        token = page_token(*following.after) if following is not None and following.after else ""
        return control_pb2.ListExecutionsResponse(
            executions=[convert.execution_to_proto(e) for e in executions], next_page_token=token
        )

    @unary()
    async def ListWorkflows(
        self, request: control_pb2.ListWorkflowsRequest, context: grpc.aio.ServicerContext
    ):
        caller = await self._caller(context)
        found = await self.dispatcher.list_workflows(
            request.name, request.version, None if caller.cluster_admin else caller.tenant
        )
        return control_pb2.ListWorkflowsResponse(
            workflows=[convert.workflow_to_proto(record, versions) for record, versions in found]
        )

    @unary()
    async def PauseWorker(self, request: control_pb2.PauseWorkerRequest, context: grpc.aio.ServicerContext):
        worker = await self.dispatcher.set_paused(request.name, True)
        await self.dispatcher.audit.record(await self._caller(context), "worker.pause", request.name)
        return convert.worker_to_proto(worker)

    @unary()
    async def ResumeWorker(self, request: control_pb2.ResumeWorkerRequest, context: grpc.aio.ServicerContext):
        worker = await self.dispatcher.set_paused(request.name, False)
        await self.dispatcher.audit.record(await self._caller(context), "worker.resume", request.name)
        return convert.worker_to_proto(worker)

    @unary()
    async def GetMetrics(self, request: control_pb2.GetMetricsRequest, context: grpc.aio.ServicerContext):
        # Open without a token (flux.security.auth.OPEN): aggregates only, nothing that names a worker or workflow.
        # Tenants' names, quotas and usage only for the metrics token or a cluster admin's.
        status = convert.status_to_proto(await self.status.aggregate(METRICS_MAX_AGE))
        if not await self._sees_every_tenant(context):
            del status.tenants[:]
        return status

    async def _sees_every_tenant(self, context: grpc.aio.ServicerContext) -> bool:
        """Whether the caller of GetMetrics presented the metrics token or a cluster admin's token.

        No token: aggregates, as Prometheus scrapes by default. A token that is neither valid API
        token nor the metrics token is refused rather than quietly answered with less: a scraper
        given the wrong file would otherwise lose its tenant series without a word.
        """
        token = bearer(context.invocation_metadata())
        if self.callers is None or self.callers.tokens is None:
            return True  # authentication off (--insecure): every caller is the operator
        if not token:
            return False
        if self.metrics_token and hmac.compare_digest(token.encode(), self.metrics_token.encode()):
            return True
        caller = await self.callers.caller(token)
        if caller is None:
            raise Unauthenticated(
                "invalid metrics token: present the token of --metrics-token-file or a cluster-admin "
                "API token, or none for the aggregates alone"
            )
        return caller.cluster_admin
