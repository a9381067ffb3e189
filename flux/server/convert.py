"""Domain <-> protobuf for the control plane's messages. Only edge modules import this."""

from __future__ import annotations

from types import MappingProxyType

from flux.dispatcher.core import Why, WorkerRegistration
from flux.dispatcher.session import Cancelled, Event, Ping, Scheduled
from flux.dispatcher.workers import WorkerEntry
from flux.domain.execution import Execution, ExecutionError, WorkflowRef
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.errors import InvalidArgument
from flux.store.base import WorkflowRecord
from flux.v1 import control_pb2, worker_pb2


def _invalid(exc: Exception, field: str) -> InvalidArgument:
    message = str(exc)
    return InvalidArgument(message if message.startswith(field) else f"{field}: {message}")


def requests_from_proto(message: object, field: str) -> ResourceRequest:
    try:
        return ResourceRequest.from_proto(message)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise _invalid(exc, field) from None


def resources_from_proto(message: object, field: str = "resources") -> WorkerResources:
    try:
        return WorkerResources.from_proto(message)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise _invalid(exc, field) from None


def registration_from_proto(request: worker_pb2.RegisterRequest, transport: str) -> WorkerRegistration:
    return WorkerRegistration(
        name=request.name,
        resources=resources_from_proto(request.resources),
        software=WorkerSoftware.from_proto(request.software),
        labels=dict(request.labels),
        capacity=request.capacity,
        session_token=request.session_token,
        transport=transport,
    )


def workflows_from_proto(request: control_pb2.RegisterWorkflowRequest) -> list[WorkflowRecord]:
    records = []
    for position, wf in enumerate(request.workflows):
        records.append(
            WorkflowRecord(
                name=wf.name,
                version=0,
                source_hash="",
                entrypoint=wf.entrypoint,
                requests=requests_from_proto(wf.requests, f"workflows[{position}].requests"),
                affinity=MappingProxyType(dict(wf.affinity)),
                max_attempts=wf.max_attempts or 3,
                filename=request.filename,
            )
        )
    return records


def ref_to_proto(ref: WorkflowRef) -> worker_pb2.WorkflowRef:
    return worker_pb2.WorkflowRef(
        name=ref.name, version=ref.version, source_hash=ref.source_hash, entrypoint=ref.entrypoint
    )


def error_to_proto(error: ExecutionError | None) -> worker_pb2.ExecutionError | None:
    if error is None:
        return None
    return worker_pb2.ExecutionError(type=error.type, message=error.message, traceback=error.traceback)


def error_from_proto(message: worker_pb2.ExecutionError) -> ExecutionError:
    return ExecutionError(message.type, message.message, message.traceback)


def execution_to_proto(e: Execution) -> control_pb2.Execution:
    return control_pb2.Execution(
        execution_id=e.execution_id,
        workflow=ref_to_proto(e.workflow),
        state=int(e.state),  # type: ignore[arg-type]
        worker=e.worker,
        attempt=e.attempt,
        generation=e.generation,
        input_json=e.input_json,
        output_json=e.output_json,
        error=error_to_proto(e.error),
        gpu_indices=list(e.gpu_indices),
        created_at_ms=int(e.created_at * 1000),
        updated_at_ms=int(e.updated_at * 1000),
    )


def event_to_proto(event: Event) -> worker_pb2.WorkerEvent:
    if isinstance(event, Scheduled):
        e = event.execution
        return worker_pb2.WorkerEvent(
            execution_scheduled=worker_pb2.ExecutionScheduled(
                execution_id=e.execution_id,
                attempt=e.attempt,
                generation=e.generation,
                input_json=e.input_json,
                workflow=ref_to_proto(e.workflow),
                gpu_indices=list(e.gpu_indices),
                requests=event.requests.to_proto(),
            )
        )
    if isinstance(event, Cancelled):
        return worker_pb2.WorkerEvent(
            execution_cancelled=worker_pb2.ExecutionCancelled(
                execution_id=event.execution_id, generation=event.generation, reason=event.reason
            )
        )
    if isinstance(event, Ping):
        return worker_pb2.WorkerEvent(ping=worker_pb2.Ping(sent_at_ms=int(event.sent_at * 1000)))
    raise TypeError(f"unknown event {event!r}")


def worker_to_proto(entry: WorkerEntry) -> control_pb2.WorkerInfo:
    reserved = entry.reserved
    return control_pb2.WorkerInfo(
        name=entry.name,
        labels=dict(entry.labels),
        resources=entry.resources.to_proto(),
        reserved=control_pb2.Reserved(
            cpu=reserved.cpu, memory=reserved.memory, disk=reserved.disk, gpu_indices=sorted(entry.held_gpus)
        ),
        capacity=entry.capacity,
        active_executions=len(entry.holdings),
        connected=entry.connected,
        transport=entry.transport,
        last_seen_ms=int(entry.last_seen * 1000),
        package_count=len(entry.software.packages),
    )


def why_to_proto(why: Why) -> control_pb2.Explanation:
    message = control_pb2.Explanation(
        execution_id=why.execution.execution_id,
        state=int(why.execution.state),  # type: ignore[arg-type]
        summary=why.summary,
    )
    if why.explanation is not None:
        message.infeasible = why.explanation.infeasible
        for verdict in why.explanation.verdicts:
            message.workers.append(
                control_pb2.WorkerVerdict(
                    worker=verdict.worker,
                    fits=verdict.fits,
                    rejections=[
                        control_pb2.Rejection(
                            reason=str(r.reason),
                            detail=r.detail,
                            permanent=r.permanent,
                            wanted=r.wanted,
                            offered=r.offered,
                        )
                        for r in verdict.rejections
                    ],
                )
            )
    return message
