"""Submission requests (RunWorkflow, RunWorkflows) as the dispatcher's overrides, batch asks and
graph items, checked at the edge."""

from __future__ import annotations

from collections.abc import Iterable

from flux.dispatcher.transitions.batches import BatchAsk, checked_ask
from flux.dispatcher.transitions.graphs import GraphItem
from flux.dispatcher.transitions.submission import Overrides
from flux.domain.gang import validate_gang_size
from flux.domain.limits import check_run_key
from flux.domain.policy import parse_duration, retry_from_proto
from flux.errors import InvalidArgument
from flux.v1 import control_pb2


def run_overrides(run: control_pb2.RunWorkflowRequest | control_pb2.RunWorkflowsRequest) -> Overrides:
    """A run's attempt timeout, retry policy and flow-control key, checked; None for each it leaves
    to the workflow."""
    timeout = retry = key = gang_size = None
    try:
        if run.HasField("gang_size"):
            gang_size = validate_gang_size(run.gang_size, "gang_size")
        if run.HasField("key"):
            key = check_run_key(run.key, "key")
        if run.HasField("attempt_timeout_s"):
            timeout = parse_duration(run.attempt_timeout_s, "attempt_timeout_s")
        if run.HasField("retry"):
            retry = retry_from_proto(run.retry, "retry")
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None
    return Overrides(timeout, retry, key, gang_size, tuple(run.after), run.when)


# RunAndWaitStreamRequest.receipt_after_ms: at most a minute.
MAX_RECEIPT_AFTER_MS = 60_000


def receipt_after(request: control_pb2.RunAndWaitStreamRequest) -> float:
    """How long a RunAndWaitStream run's receipt may wait for its final state, in seconds (checked)."""
    if request.receipt_after_ms > MAX_RECEIPT_AFTER_MS:
        raise InvalidArgument(
            f"receipt_after_ms is {request.receipt_after_ms}; give 0 (the receipt at once) to "
            f"{MAX_RECEIPT_AFTER_MS} milliseconds"
        )
    return request.receipt_after_ms / 1000


def batch_ask(run: control_pb2.RunWorkflowsRequest) -> BatchAsk:
    """A bulk submission's batch fields, checked (transitions/batches.py)."""
    most = run.max_concurrent if run.HasField("max_concurrent") else None
    return checked_ask(run.batch, most, run.batch_id)


def graph_items_from_proto(items: Iterable[control_pb2.RunItem]) -> list[GraphItem]:
    """RunWorkflows ``items``, as the dispatcher's graph items (checked there, naming each item)."""
    return [
        GraphItem(
            workflow_name=item.workflow_name,
            input_json=item.input_json,
            version=item.version,
            priority=item.priority if item.HasField("priority") else None,
            after=tuple(item.after),
            after_index=tuple(item.after_index),
            when=item.when,
            key=check_run_key(item.key, f"items[{index}].key") if item.HasField("key") else None,
        )
        for index, item in enumerate(items)
    ]
