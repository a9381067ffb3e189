"""Domain <-> protobuf for the worker's side: registration, completed items and their answers, and
the events pushed down a worker's stream (batched dispatches). Its own module because only the
worker-facing services need it, and the control plane's conversions (convert.py) stay readable."""

from __future__ import annotations

import functools

from flux.dispatcher.core import WorkerRegistration
from flux.dispatcher.state.session import Event, Ping, Scheduled, Stop
from flux.dispatcher.transitions.worker_calls import Answers, Result
from flux.domain.execution import Execution, ExecutionError
from flux.domain.worker import WorkerSoftware
from flux.errors import InvalidArgument, status_of
from flux.observe import tracing
from flux.server.convert import resources_from_proto
from flux.v1 import trace_pb2, worker_pb2


def registration_from_proto(
    request: worker_pb2.RegisterRequest, transport: str, peer: str = ""
) -> WorkerRegistration:
    """``peer``: gRPC's ``context.peer()``, whose host is the worker's address unless it advertises one."""
    return WorkerRegistration(
        name=request.name,
        resources=resources_from_proto(request.resources),
        software=WorkerSoftware.from_proto(request.software),
        labels=dict(request.labels),
        capacity=request.capacity,
        prefetch=request.prefetch,
        session_token=request.session_token,
        transport=transport,
        address=request.advertise_address or peer_host(peer),
    )


def peer_host(peer: str) -> str:
    """The host of ``ipv4:10.0.0.7:5123`` or ``ipv6:[::1]:5123``; "" for a unix socket or nothing."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        host = rest.rpartition(":")[0]
        return host[1:-1] if host.startswith("[") else host
    return ""


def result_from_proto(item: worker_pb2.CompleteItem, field: str) -> Result:
    """A malformed item refuses the whole batch (the request is wrong, not the item's state)."""
    result = item.WhichOneof("result")
    if result is None:
        raise InvalidArgument(f"{field}.result is missing; set output_json or error")
    return Result(
        item.execution_id,
        item.generation,
        item.output_json if result == "output_json" else None,
        ExecutionError.from_proto(item.error) if result == "error" else None,
        item.claim,
    )


def item_answers(items: list[tuple[str, int]], answers: Answers) -> list[worker_pb2.ItemAnswer]:
    """Per item: ok, or the refusal under the status name the single call would have answered."""
    return [
        worker_pb2.ItemAnswer(execution_id=execution_id, ok=True)
        if refusal is None
        else worker_pb2.ItemAnswer(
            execution_id=execution_id, code=status_of(refusal)[0].name, message=str(refusal)
        )
        for (execution_id, _), refusal in zip(items, answers, strict=True)
    ]


def scheduled_to_proto(event: Scheduled) -> worker_pb2.ExecutionScheduled:
    e = event.execution
    # The dispatch span's context; from a core that does not trace, the submitter's own.
    if e.dispatch_trace or e.trace:
        traceparent, tracestate = tracing.split(e.dispatch_trace or e.trace)
        trace = trace_pb2.TraceContext(traceparent=traceparent, tracestate=tracestate)
    else:
        trace = None
    return worker_pb2.ExecutionScheduled(
        execution_id=e.execution_id,
        attempt=e.attempt,
        generation=e.generation,
        input_json=e.input_json,
        workflow=e.workflow.to_proto(),
        gpu_indices=list(e.gpu_indices),
        requests=event.requests.to_proto(),
        trace=trace,
        queued=event.queued,
        priority=e.priority,
        upstream=dict(e.upstream),
        **_timing_fields(e),
        **_gang_fields(e),
    )


def _gang_fields(e: Execution) -> dict[str, object]:
    """A gang member's rank and every member (``e.worker`` is the member this dispatch is for)."""
    if e.gang is None:
        return {}
    return {"gang_rank": e.gang.rank_of(e.worker) or 0, "gang_members": e.gang.to_proto()}


def _timing_fields(e: Execution) -> dict[str, object]:
    """What a worker needs of an execution's policy: its time limit (what is left of it after
    preempted tries), how often to say it is alive, and the last try's heartbeat."""
    policy = e.policy
    if policy is None:
        return {"last_heartbeat_json": e.heartbeat} if e.heartbeat else {}
    fields: dict[str, object] = {"last_heartbeat_json": e.heartbeat}
    if policy.timeout is not None:
        fields["timeout_s"] = max(0.001, policy.timeout - e.run_time)
    if policy.heartbeat_timeout is not None:
        # Three chances within the timeout: one lost or late heartbeat does not lose the attempt.
        fields["heartbeat_interval_s"] = policy.heartbeat_timeout / 3
    return fields


# Inputs one ExecutionsScheduled may carry, in bytes: far below the 16 MiB message cap,
# so a batch of large inputs is split rather than refused by the worker's channel.
BATCH_INPUT_BYTES = 4 << 20


def events_to_proto(events: list[Event], batched: bool) -> list[worker_pb2.WorkerEvent]:
    """The stream messages for events taken together: with ``batched``, consecutive dispatches
    share one ExecutionsScheduled (order kept, inputs up to ``BATCH_INPUT_BYTES`` each)."""
    if not batched:
        return [event_to_proto(event) for event in events]
    messages: list[worker_pb2.WorkerEvent] = []
    run: list[worker_pb2.ExecutionScheduled] = []

    def close_run() -> None:
        if len(run) == 1:
            messages.append(worker_pb2.WorkerEvent(execution_scheduled=run[0]))
        elif run:
            messages.append(
                worker_pb2.WorkerEvent(executions_scheduled=worker_pb2.ExecutionsScheduled(executions=run))
            )
        run.clear()

    size = 0  # input bytes in ``run``
    for event in events:
        if not isinstance(event, Scheduled):
            close_run()
            size = 0
            messages.append(event_to_proto(event))
            continue
        length = len(event.execution.input_json)
        if run and size + length > BATCH_INPUT_BYTES:
            close_run()
            size = 0
        run.append(scheduled_to_proto(event))
        size += length
    close_run()
    return messages


def event_to_proto(event: Event) -> worker_pb2.WorkerEvent:
    if isinstance(event, Scheduled):
        return worker_pb2.WorkerEvent(execution_scheduled=scheduled_to_proto(event))
    if isinstance(event, Stop):
        return worker_pb2.WorkerEvent(
            execution_cancelled=worker_pb2.ExecutionCancelled(
                execution_id=event.execution_id,
                generation=event.generation,
                reason=event.reason,
                preempted=event.preempted,
            )
        )
    if isinstance(event, Ping):
        return _ping_to_proto(event)
    raise TypeError(f"unknown event {event!r}")


@functools.lru_cache(maxsize=1)
def _ping_to_proto(ping: Ping) -> worker_pb2.WorkerEvent:
    # Every stream pinged in one step gets the same ping (pings.py): one message built, not one
    # per stream. Shared, so never mutated; grpc serializes it on each write.
    return worker_pb2.WorkerEvent(ping=worker_pb2.Ping(sent_at_ms=int(ping.sent_at * 1000)))
