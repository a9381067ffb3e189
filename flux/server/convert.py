"""Domain <-> protobuf for the control plane's messages. Only edge modules import this."""

from __future__ import annotations

from types import MappingProxyType

from flux.dispatcher.core import Diagnosis
from flux.dispatcher.state.lifecycle import Counters, Refusal
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.domain.execution import Execution
from flux.domain.gang import Gang, GangRun
from flux.domain.limits import Flow, flow_from_proto, flow_to_proto
from flux.domain.placement import validate_placement
from flux.domain.policy import (
    RETRY_REASONS,
    TIMEOUT_KINDS,
    Policy,
    attempt_to_proto,
    default_policy_proto,
    policy_from_proto,
    policy_to_proto,
)
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import DEFAULT_RUNTIME, WorkerResources
from flux.domain.workflow import WorkflowRecord
from flux.errors import InvalidArgument
from flux.observe.fleet import Change
from flux.observe.status import Allocation, Status
from flux.server.pool_convert import pools_to_proto
from flux.server.tenant_convert import tenant_statuses_to_proto
from flux.v1 import control_pb2, tenants_pb2, trace_pb2


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


def workflows_from_proto(request: control_pb2.RegisterWorkflowRequest) -> list[WorkflowRecord]:
    records = []
    for position, wf in enumerate(request.workflows):
        policy = workflow_policy(wf, f"workflows[{position}]")
        records.append(
            WorkflowRecord(
                name=wf.name,
                version=0,
                source_hash="",
                entrypoint=wf.entrypoint,
                requests=requests_from_proto(wf.requests, f"workflows[{position}].requests"),
                affinity=MappingProxyType(dict(wf.affinity)),
                max_attempts=policy.max_attempts,
                filename=request.filename,
                runtime=wf.runtime or DEFAULT_RUNTIME,
                priority=wf.priority,
                policy=None if policy.is_default() else policy,
                flow=workflow_flow(wf, f"workflows[{position}]"),
                gang=workflow_gang(wf, f"workflows[{position}]"),
                placement=workflow_placement(wf, f"workflows[{position}]"),
            )
        )
    return records


def workflow_flow(wf: control_pb2.WorkflowMetadata, field: str) -> Flow:
    """A registered workflow's flow control, checked as its declaration was."""
    if not wf.HasField("flow"):
        return Flow()
    try:
        return flow_from_proto(wf.flow, f"{field}.flow")
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None


def workflow_gang(wf: control_pb2.WorkflowMetadata, field: str) -> Gang | None:
    """A registered workflow's gang, checked as its declaration was."""
    if not wf.HasField("gang"):
        return None
    try:
        return Gang.from_proto(wf.gang, f"{field}.gang")
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None


def workflow_placement(wf: control_pb2.WorkflowMetadata, field: str) -> str:
    """A registered workflow's placement policy ("" for the server's), checked as its declaration was."""
    try:
        return validate_placement(wf.placement, f"{field}.placement", allow_empty=True)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None


def workflow_policy(wf: control_pb2.WorkflowMetadata, field: str) -> Policy:
    """A registered workflow's policy; an older client sends max_attempts alone."""
    try:
        policy = policy_from_proto(wf.policy, wf.max_attempts or 3, f"{field}.policy")
    except (TypeError, ValueError) as exc:
        raise _invalid(exc, field) from None
    if wf.max_attempts and policy.max_attempts != wf.max_attempts:
        raise InvalidArgument(
            f"{field}.max_attempts ({wf.max_attempts}) disagrees with {field}.policy.retry.max_attempts "
            f"({policy.max_attempts})"
        )
    return policy


def execution_to_proto(e: Execution) -> control_pb2.Execution:
    return control_pb2.Execution(
        execution_id=e.execution_id,
        workflow=e.workflow.to_proto(),
        state=int(e.state),  # type: ignore[arg-type]
        worker=e.worker,
        attempt=e.attempt,
        generation=e.generation,
        input_json=e.input_json,
        output_json=e.output_json,
        error=e.error.to_proto() if e.error is not None else None,
        gpu_indices=list(e.gpu_indices),
        created_at_ms=int(e.created_at * 1000),
        updated_at_ms=int(e.updated_at * 1000),
        priority=e.priority,
        tenant=e.tenant,
        reason=e.reason,
        attempts=[attempt_to_proto(a) for a in e.attempts],
        not_before_ms=int(e.not_before * 1000),
        heartbeat_json=e.heartbeat,
        policy=policy_to_proto(e.policy) if e.policy is not None else default_policy_proto(e.max_attempts),
        started_at_ms=int(e.started_at * 1000),
        flow_keys=dict(e.flow_keys),
        gang_size=e.gang.size if e.gang is not None else 0,
        gang_members=gang_members_to_proto(e.gang) if e.gang is not None else None,
        batch_id=e.batch_id,
        after=list(e.after),
        when=e.when,
        dependencies_waiting=e.waiting,
    )


def gang_members_to_proto(gang: GangRun) -> list[object]:
    return gang.to_proto()


def fleet_event_to_proto(change: Change, subject: object, sequence: int, at: float) -> control_pb2.FleetEvent:
    """A fleet change as sent; built at once, since a WorkerEntry keeps changing after the call."""
    if change.about_worker:
        payload: object = worker_to_proto(subject)  # type: ignore[arg-type]
    else:
        payload = execution_to_proto(subject.evolve(input_json="", output_json=""))  # type: ignore[attr-defined]
    return control_pb2.FleetEvent(sequence=sequence, at_ms=int(at * 1000), **{str(change): payload})


def worker_to_proto(entry: WorkerEntry) -> control_pb2.WorkerInfo:
    reserved, view = entry.reserved, entry.view()
    return control_pb2.WorkerInfo(
        name=entry.name,
        labels=dict(entry.labels),
        resources=entry.resources.to_proto(),
        reserved=control_pb2.Reserved(
            cpu=reserved.cpu, memory=reserved.memory, disk=reserved.disk, gpu_indices=sorted(entry.held_gpus)
        ),
        capacity=entry.capacity,
        active_executions=entry.active,
        connected=entry.connected,
        transport=entry.transport,
        last_seen_ms=int(entry.last_seen * 1000),
        package_count=len(entry.software.packages),
        draining=entry.draining,
        free=control_pb2.Allocation(
            cpu=view.free_cpu, memory=view.free_memory, disk=view.free_disk, gpus=len(view.free_gpus)
        ),
        paused=entry.paused,
        runtimes=list(entry.software.runtimes),
        address=entry.address,
    )


def workflow_to_proto(record: WorkflowRecord, versions: int) -> control_pb2.WorkflowInfo:
    return control_pb2.WorkflowInfo(
        name=record.name,
        version=record.version,
        source_hash=record.source_hash,
        entrypoint=record.entrypoint,
        requests=record.requests.to_proto(),
        affinity=dict(record.affinity),
        max_attempts=record.max_attempts,
        runtime=record.runtime,
        filename=record.filename,
        registered_at_ms=int(record.registered_at * 1000),
        version_count=versions,
        priority=record.priority,
        tenant=record.tenant,
        policy=policy_to_proto(record.policy) if record.policy else default_policy_proto(record.max_attempts),
        flow=flow_to_proto(record.flow) if not record.flow.empty else None,
        gang=record.gang.to_proto() if record.gang is not None else None,
        placement=record.placement,
    )


def why_to_proto(why: Diagnosis) -> control_pb2.Explanation:
    message = control_pb2.Explanation(
        execution_id=why.execution.execution_id,
        state=int(why.execution.state),  # type: ignore[arg-type]
        summary=why.summary,
        priority=why.execution.priority,
        attempts=[attempt_to_proto(a) for a in why.execution.attempts],
        not_before_ms=int(why.execution.not_before * 1000),
        max_attempts=why.execution.max_attempts,
    )
    if why.queue_position is not None:
        message.queued_ahead = why.queue_position
    if why.explanation is not None:
        message.infeasible = why.explanation.infeasible
        message.nominated_worker = why.explanation.nominated
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


def _allocation(a: Allocation) -> control_pb2.Allocation:
    return control_pb2.Allocation(cpu=a.cpu, memory=a.memory, disk=a.disk, gpus=a.gpus)


def _with_refusals(
    tenants: list[tenants_pb2.TenantStatus], counters: Counters
) -> list[tenants_pb2.TenantStatus]:
    """Each tenant's preemptions held back, by reason (every reason present, zero when none)."""
    for tenant in tenants:
        for reason in Refusal:
            tenant.preemptions_refused[str(reason)] = counters.preemptions_refused_by_tenant.get(
                (tenant.name, reason), 0
            )
    return tenants


def status_to_proto(status: Status) -> control_pb2.ClusterStatus:
    fleet = status.fleet
    counters = status.counters
    return control_pb2.ClusterStatus(
        now_ms=int(status.now * 1000),
        placement=status.placement,
        started_at_ms=int(status.started_at * 1000),
        workers=[worker_to_proto(w) for w in status.workers],
        pending=[
            control_pb2.PendingShape(
                requests=p.shape.requests.to_proto(),
                affinity=dict(p.shape.affinity),
                count=p.count,
                oldest_wait_ms=int(p.oldest_wait * 1000),
                oldest_execution_id=p.oldest_execution_id,
                oldest_workflow=p.oldest_workflow,
                summary=p.summary,
                reason=p.reason,
                nominated_worker=p.nominated_worker,
            )
            for p in status.pending
        ],
        pending_shapes_omitted=status.pending_shapes_omitted,
        workers_omitted=status.workers_omitted,
        pending_by_reason=status.pending_by_reason,
        pools=pools_to_proto(status.pools),
        tenants=_with_refusals(tenant_statuses_to_proto(status.tenants), status.counters),
        limits=[
            control_pb2.LimitStatus(limit=name, in_use=in_use, waiting=waiting, rate_limited=limited)
            for name, in_use, waiting, limited in status.limits
        ],
        schedule_ticks=dict(status.schedule_ticks),
        schedules_active=status.schedules[0],
        schedules_paused=status.schedules[1],
        fleet=control_pb2.FleetTotals(
            connected_by_transport=fleet.connected_by_transport,
            disconnected=fleet.disconnected,
            draining=fleet.draining,
            allocatable=_allocation(fleet.allocatable),
            reserved=_allocation(fleet.reserved),
            active_executions=fleet.active_executions,
            capacity=fleet.capacity,
            free=_allocation(fleet.free),
        ),
        executions=[
            control_pb2.StateCount(state=int(state), count=count)  # type: ignore[arg-type]
            for state, count in sorted(status.executions.items())
        ],
        counters=control_pb2.LifecycleCounters(
            submitted=counters.submitted,
            dispatched=counters.dispatched,
            claimed=counters.claimed,
            completed=counters.completed,
            failed=counters.failed,
            cancelled=counters.cancelled,
            requeued={str(reason): n for reason, n in counters.requeued.items()},
            ack_deadline_expiries=counters.ack_deadline_expiries,
            preempted={str(reason): n for reason, n in counters.preempted.items()},
            preemptions_refused={str(reason): n for reason, n in counters.preemptions_refused.items()},
            retries={**dict.fromkeys(RETRY_REASONS, 0), **counters.retries},
            timeouts={**dict.fromkeys(TIMEOUT_KINDS, 0), **counters.timeouts},
            stream_reconnects=counters.stream_reconnects,
            stream_connects=counters.stream_connects,
            worker_messages_sent=counters.worker_messages_sent,
            worker_messages_received=counters.worker_messages_received,
            queued_dispatches=counters.queued_dispatches,
            dependencies_released=counters.dependencies_released,
            dependencies_cancelled=counters.dependencies_cancelled,
        ),
        dependencies_waiting=status.dependencies_waiting,
        latencies=[
            control_pb2.LatencyHistogram(
                stage=stage,
                bounds=h.bounds,
                counts=h.counts,
                sum=h.sum,
                count=h.count,
                exemplars=[
                    trace_pb2.BucketExemplar(
                        bucket=bucket, trace_id=e.trace_id, value=e.value, timestamp_ms=int(e.at * 1000)
                    )
                    for bucket, e in sorted(h.exemplars.items())
                ],
            )
            for stage, h in status.latency.items()
        ],
    )


def accepted_to_proto(e: Execution) -> control_pb2.Execution:
    """A graph's execution as RunWorkflows answers it: what was decided at acceptance (its id,
    workflow, state, dependencies, priority, tenant and time), not its policy or input, which the
    caller sent (GetExecution has them). A third of the cost of the full form, for 10,000 items."""
    message = control_pb2.Execution(
        execution_id=e.execution_id,
        workflow=e.workflow.to_proto(),
        state=int(e.state),  # type: ignore[arg-type]
        worker=e.worker,
        generation=e.generation,
        attempt=e.attempt,
        created_at_ms=int(e.created_at * 1000),
        updated_at_ms=int(e.updated_at * 1000),
        priority=e.priority,
        tenant=e.tenant,
        reason=e.reason,
        after=e.after,
        when=e.when,
        dependencies_waiting=e.waiting,
    )
    if e.error is not None:
        message.error.CopyFrom(e.error.to_proto())
    return message
