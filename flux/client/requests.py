"""What both clients (``flux.client``, ``flux.aio``) send and how they read the answers, apart
from the transport: requests built from Python values, inputs as JSON in per-call chunks,
execution ids and final states, and the errors a failed call means (``WaitTimedOut`` too).

Kept apart so the blocking and the asyncio client share one definition of each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import grpc

from flux import defaults
from flux.domain.dependencies import checked_when
from flux.domain.gang import validate_gang_size
from flux.domain.limits import check_run_key, flow_to_proto
from flux.domain.policy import Retry, parse_duration, policy_to_proto, retry_to_proto
from flux.errors import FluxError, InvalidArgument, Unavailable, from_grpc_code
from flux.observe import tracing
from flux.registration import WorkflowFile
from flux.security import TLS_HINT, Credentials, speaks_tls
from flux.v1 import control_pb2


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
                policy=policy_to_proto(wf.policy) if wf.policy is not None else None,
                flow=flow_to_proto(wf.flow) if not wf.flow.empty else None,
                gang=wf.gang.to_proto() if wf.gang is not None else None,
                placement=wf.placement,
            )
        )
    return request


def execution_ids(executions: Iterable[control_pb2.Execution | str]) -> list[str]:
    """The ids of ``executions`` (executions or ids), in order."""
    return [e if isinstance(e, str) else e.execution_id for e in executions]


def run_request(
    workflow: str,
    input_json: str,
    version: int,
    priority: int | None,
    attempt_timeout: float | str | None = None,
    retry: Retry | None = None,
    key: str | None = None,
    after: Iterable[control_pb2.Execution | str] | None = None,
    when: str | None = None,
    gang_size: int | None = None,
) -> control_pb2.RunWorkflowRequest:
    """``attempt_timeout``, ``retry``, ``key``, ``when`` and ``gang_size`` are checked here, so a bad
    one fails before any call. ``after``: executions (or their ids) this run waits for."""
    request = control_pb2.RunWorkflowRequest(workflow_name=workflow, input_json=input_json, version=version)
    if priority is not None:
        request.priority = priority
    if attempt_timeout is not None:
        request.attempt_timeout_s = parse_duration(attempt_timeout, "attempt_timeout")
    if retry is not None:
        if not isinstance(retry, Retry):
            raise TypeError(f"retry must be a Retry, e.g. Retry(max_attempts=5); got {type(retry).__name__}")
        request.retry.CopyFrom(retry_to_proto(retry))
    if key is not None:
        request.key = check_run_key(key)
    if gang_size is not None:
        request.gang_size = validate_gang_size(gang_size, "gang_size")
    if after:
        request.after.extend(execution_ids(after))
        request.when = checked_when(when)
    elif when is not None:
        checked_when(when)
    return request


def _unencodable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One encoder for every input, as json.dumps(value, allow_nan=False) encodes it: json.dumps with
# an argument makes a new encoder per call (a third of the client's time for a 100,000-input
# map). CPython's C encoder is called directly where there is one (without json's Python layers
# around each call: 0.5 µs an input, not 1.4); a value that holds itself recurses until refused.
_ENCODER = json.JSONEncoder(allow_nan=False)
_C_ENCODER = (
    json.encoder.c_make_encoder(
        None, _unencodable, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, False
    )
    if json.encoder.c_make_encoder is not None
    else None
)


def _encode(value: object) -> str:
    return "".join(_C_ENCODER(value, 0)) if _C_ENCODER is not None else _ENCODER.encode(value)


def encode_inputs(inputs: Iterable[Any]) -> list[str]:
    """Each input as JSON, or ``InvalidArgument`` naming the first that cannot be sent."""
    encoded = []
    for index, value in enumerate(inputs):
        try:
            encoded.append(_encode(value))
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidArgument(f"inputs[{index}] cannot be sent as JSON: {exc}") from None
    return encoded


def finished(execution: control_pb2.Execution) -> bool:
    return execution.state >= control_pb2.EXECUTION_STATE_COMPLETED


def in_order(ids: list[str], finals: dict[str, control_pb2.Execution]) -> list[control_pb2.Execution]:
    return [finals[execution_id] for execution_id in ids]


def run_many_request(
    workflow: str,
    chunk: list[str],
    version: int,
    priority: int | None,
    key: str | None = None,
    gang_size: int | None = None,
) -> control_pb2.RunWorkflowsRequest:
    request = control_pb2.RunWorkflowsRequest(workflow_name=workflow, input_json=chunk, version=version)
    if priority is not None:
        request.priority = priority
    if key is not None:
        request.key = check_run_key(key)
    if gang_size is not None:
        request.gang_size = validate_gang_size(gang_size, "gang_size")
    return request


def list_executions_request(
    states: list[int] | tuple[int, ...],
    workflow: str,
    worker: str,
    created_after_ms: int,
    page_size: int,
    page_token: str,
) -> control_pb2.ListExecutionsRequest:
    return control_pb2.ListExecutionsRequest(
        states=states,
        workflow=workflow,
        worker=worker,
        created_after_ms=created_after_ms,
        page_size=page_size,
        page_token=page_token,
    )


def id_chunks(ids: list[str]) -> list[list[str]]:
    """The ids in ``WaitExecutions``-sized pieces (one stream each)."""
    size = defaults.MAX_BATCH_INPUTS
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def submit_span(
    address: str, method: str, workflow: str, metadata: Sequence[tuple[str, str]], traced: bool
) -> tuple[Any, tuple[tuple[str, str], ...]]:
    """For a streamed submission, traced: a started ``flux.submit`` span (not current; the caller
    ends it at the receipt) and the call's metadata carrying its context; else (None, metadata)."""
    if not traced:
        return None, tuple(metadata)
    span = tracing.start("flux.submit", kind="CLIENT", **tracing.submit_attributes(address, method, workflow))
    return span, (*metadata, *tracing.metadata(tracing.carrier_of(span)))
