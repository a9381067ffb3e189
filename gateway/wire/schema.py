"""Pydantic models derived from the ``flux.v1`` descriptors, so OpenAPI shows the wire shapes.

The ``.proto`` files stay the one definition: each model is built from a
message descriptor (field names as in the ``.proto``, comments aside), and
bodies are still converted with ``json_format`` after validation, so the
models describe the proto3 JSON mapping rather than re-implementing it.
Unknown fields are refused (a typo in a resource report must not pass
silently).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints, create_model

from flux.v1 import control_pb2, worker_pb2
from gateway.wire.protojson import QUANTITY_MESSAGES

_INT32 = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32}
_UINT32 = {FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32}
_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_SFIXED64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_FIXED64,
}


class ProtoModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def to_json_dict(self) -> dict[str, Any]:
        """What the client sent, ready for ``json_format.ParseDict``."""
        return self.model_dump(exclude_unset=True, exclude_none=True)


_models: dict[str, type[ProtoModel]] = {}


def _enum(descriptor: EnumDescriptor) -> Any:
    names = tuple(value.name for value in descriptor.values)
    return Literal[names] | int  # type: ignore[valid-type]


def _scalar(field: FieldDescriptor) -> tuple[Any, dict[str, Any]]:
    t = field.type
    if t in _INT32:
        return int, {"ge": -(2**31), "le": 2**31 - 1}
    if t in _UINT32:
        return int, {"ge": 0, "le": 2**32 - 1}
    if t in _INT64:
        # The proto3 JSON mapping writes 64-bit integers as decimal strings and reads both forms;
        # the schema says exactly that, not "any string".
        # (Range is left to the proto parser: JSON schema bounds this large print as inexact floats.)
        unsigned = t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)
        digits = Annotated[str, StringConstraints(pattern=_UNSIGNED if unsigned else _SIGNED, max_length=20)]
        return StrictInt | digits, {}  # strict: a string goes to the pattern, not int's lax parsing
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return float, {}
    if t == FieldDescriptor.TYPE_BOOL:
        return bool, {}
    if t == FieldDescriptor.TYPE_ENUM:
        return _enum(field.enum_type), {}
    if t == FieldDescriptor.TYPE_MESSAGE:
        return model_of(field.message_type), {}
    return str, {}  # string; bytes are base64 strings in the mapping


_SIGNED = r"^-?[0-9]{1,19}$"
_UNSIGNED = r"^[0-9]{1,20}$"


def _field(field: FieldDescriptor) -> tuple[Any, Any]:
    message = field.message_type
    if message is not None and message.GetOptions().map_entry:
        key, _ = _scalar(message.fields_by_name["key"])
        value, _ = _scalar(message.fields_by_name["value"])
        annotation: Any = dict[key, value]  # type: ignore[valid-type]
        constraints: dict[str, Any] = {}
    elif field.is_repeated:
        item, _ = _scalar(field)
        annotation, constraints = list[item], {}  # type: ignore[valid-type]
    else:
        annotation, constraints = _scalar(field)
        if field.type in _INT64 and field.containing_type.full_name in QUANTITY_MESSAGES:
            # Bytes also take the Python API's quantities; their parser names a bad one ("8GB").
            quantity = Annotated[str, StringConstraints(max_length=40)]
            annotation = StrictInt | quantity
            constraints["description"] = 'bytes: an integer, or a quantity such as "8Gi", "512Mi" or "10G"'
    # Optional to leave out, never null: the server refuses `"source": null`, so the schema does too.
    return annotation, Field(default=None, json_schema_extra=_no_default, **constraints)


def _no_default(schema: dict[str, Any]) -> None:
    # An absent field is the proto3 default (0, "", []), not the null pydantic would print here.
    schema.pop("default", None)


def model_of(
    descriptor: Descriptor, *, exclude: frozenset[str] = frozenset(), name: str | None = None
) -> type[ProtoModel]:
    """The pydantic model of a message; ``exclude`` drops fields the URL or a header carries."""
    key = name or descriptor.name
    if key not in _models:
        fields = {f.name: _field(f) for f in descriptor.fields if f.name not in exclude}
        model = create_model(key, __base__=ProtoModel, **fields)  # type: ignore[call-overload]
        model.__doc__ = f"`{descriptor.full_name}` in the proto3 JSON mapping (proto field names)."
        _models[key] = model
    return _models[key]


def _body(message: Any, *excluded: str) -> type[ProtoModel]:
    descriptor = message.DESCRIPTOR
    return model_of(
        descriptor, exclude=frozenset(excluded), name=descriptor.name.removesuffix("Request") + "Body"
    )


_W, _C = worker_pb2, control_pb2
_PATH_AND_TOKEN = ("name", "session_token", "execution_id")

# Worker routes: the worker name and execution id travel in the path, the token in a header.
RegisterRequest = model_of(_W.RegisterRequest.DESCRIPTOR)
RegisterResponse = model_of(_W.RegisterResponse.DESCRIPTOR)
ReportResourcesBody = _body(_W.ReportResourcesRequest, *_PATH_AND_TOKEN[:2])
ClaimBody = _body(_W.ClaimRequest, *_PATH_AND_TOKEN)
CompleteBody = _body(_W.CompleteRequest, *_PATH_AND_TOKEN)
ReleaseBody = _body(_W.ReleaseRequest, *_PATH_AND_TOKEN)
HeartbeatBody = _body(_W.HeartbeatRequest, *_PATH_AND_TOKEN)
# Batched routes: a JSON array of these, answered by an array of ItemAnswer in the same order.
ClaimItem = model_of(_W.ClaimItem.DESCRIPTOR)
CompletionItem = model_of(
    _W.CompleteRequest.DESCRIPTOR, exclude=frozenset(_PATH_AND_TOKEN[:2]), name="CompletionItem"
)
ItemAnswer = model_of(_W.ItemAnswer.DESCRIPTOR)
WorkflowSource = model_of(_W.WorkflowSource.DESCRIPTOR)
Connected = model_of(_W.Connected.DESCRIPTOR)
ExecutionScheduled = model_of(_W.ExecutionScheduled.DESCRIPTOR)
ExecutionCancelled = model_of(_W.ExecutionCancelled.DESCRIPTOR)
Ping = model_of(_W.Ping.DESCRIPTOR)

# Client routes.
RegisterWorkflowRequest = model_of(_C.RegisterWorkflowRequest.DESCRIPTOR)
RegisterWorkflowResponse = model_of(_C.RegisterWorkflowResponse.DESCRIPTOR)
Execution = model_of(_C.Execution.DESCRIPTOR)
Explanation = model_of(_C.Explanation.DESCRIPTOR)
ListWorkersResponse = model_of(_C.ListWorkersResponse.DESCRIPTOR)
ForgetWorkerResponse = model_of(_C.ForgetWorkerResponse.DESCRIPTOR)
ClusterStatus = model_of(_C.ClusterStatus.DESCRIPTOR)
ListExecutionsResponse = model_of(_C.ListExecutionsResponse.DESCRIPTOR)
ListWorkflowsResponse = model_of(_C.ListWorkflowsResponse.DESCRIPTOR)
WorkerInfo = model_of(_C.WorkerInfo.DESCRIPTOR)
RunWorkflowsResponse = model_of(_C.RunWorkflowsResponse.DESCRIPTOR)


class RetryModel(BaseModel):
    """How failed attempts are tried again: as ``flux.Retry`` takes it (durations as seconds or '30s')."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=3, ge=1, le=100, description="tries in all, the first included")
    initial_delay: float | str = Field(default=1.0, description="the wait after the first failure")
    backoff: float = Field(
        default=2.0, ge=1, le=100, description="each later wait is this many times the last"
    )
    max_delay: float | str = Field(default=300.0, description="no wait is longer")
    jitter: bool = Field(default=True, description="each wait is a uniform pick in [wait / 2, wait]")
    retry_on: list[str] = Field(default_factory=list, description="only these exception names are retried")
    no_retry_on: list[str] = Field(default_factory=list, description="these exception names never are")


class RunBody(BaseModel):
    """Run a registered workflow. ``input`` is any JSON value, passed to the workflow as ``ctx.input``."""

    model_config = ConfigDict(extra="forbid")

    input: Any = Field(default=None, description="any JSON value; becomes ctx.input")
    version: int = Field(default=0, ge=0, le=2**31 - 1, description="workflow version; 0 means the latest")
    priority: int | None = Field(
        default=None,
        ge=-1000,
        le=1000,
        description="this run's priority, -1000 to 1000, higher first; omitted means the workflow's",
    )
    wait: bool = Field(default=False, description="answer once the execution is finished (or timeout passes)")
    timeout: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="with wait: seconds to wait before answering 202 (default 60)",
    )
    attempt_timeout: float | str | None = Field(
        default=None,
        description="this run's limit on one attempt: seconds, or '90s', '10m', '1h'; omitted means the "
        "workflow's (not how long the caller waits: that is timeout)",
    )
    retry: RetryModel | None = Field(
        default=None, description="this run's retry policy; omitted means the workflow's"
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="this run's flow-control key, in place of the one its workflow computes from the input "
        "(its concurrency per key, rate limit and per-key named limits)",
    )
    gang_size: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="run as a gang of this many members, each on its own worker, all at once or none, with "
        "the workflow's topology; omitted means the workflow's gang (or one worker)",
    )
    after: list[str] = Field(
        default_factory=list,
        max_length=100,
        description="execution ids this run waits for: it is stored at once and runs when each has ended "
        "as `when` asks (its body reads their outputs as ctx.upstream)",
    )
    when: Literal["succeeded", "failed", "finished"] | None = Field(
        default=None,
        description="how each of `after` must end: succeeded (the default), failed or finished; when one "
        "ends otherwise, this run ends CANCELLED, reason dependency",
    )


class RunManyBody(BaseModel):
    """Run a registered workflow once per input, in bulk: one durable commit for the whole call."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[Any] = Field(
        min_length=1,
        description="one JSON value per execution (each becomes that execution's ctx.input); "
        "at most 10,000 per call, within the 16 MiB body limit",
    )
    version: int = Field(default=0, ge=0, le=2**31 - 1, description="workflow version; 0 means the latest")
    priority: int | None = Field(
        default=None,
        ge=-1000,
        le=1000,
        description="these runs' priority, -1000 to 1000, higher first; omitted means the workflow's",
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="these runs' flow-control key (see a run's key)",
    )
    after: list[str] = Field(
        default_factory=list, max_length=100, description="execution ids every one of these runs waits for"
    )
    when: Literal["succeeded", "failed", "finished"] | None = Field(
        default=None, description="how each of `after` must end (see a run's when)"
    )
    batch: bool = Field(default=False, description="make these runs one new batch (GET /batches/{id})")
    max_concurrent: StrictInt | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="at most this many of the new batch's runs SCHEDULED or RUNNING at once (an int, "
        "1 to 1,000,000; makes a batch as batch does); omitted means no limit",
    )
    batch_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="add these runs to this batch (an earlier call's batch_id), for a batch larger "
        "than one call; batch and max_concurrent are then left out",
    )


class WaitBody(BaseModel):
    """Executions to wait for: their final states come as one event stream, in the order they finish."""

    model_config = ConfigDict(extra="forbid")

    execution_ids: list[str] = Field(
        min_length=1,
        max_length=10_000,
        description="ids RunWorkflow or run-many returned; at most 10,000, repeats answered once",
    )


class ErrorDetail(BaseModel):
    code: str = Field(description="the gRPC status name of the refusal, e.g. NOT_FOUND, FAILED_PRECONDITION")
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["SERVING", "NOT_SERVING"]


class TicketRequest(BaseModel):
    """Which stream the ticket opens."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["worker", "execution", "fleet"] = Field(
        description="`worker`: GET /workers/{worker}/connect; `execution`: GET /executions/{execution_id}"
        "/events; `fleet`: GET /events"
    )
    worker: str = Field(default="", max_length=63, description="with scope `worker`: the worker's name")
    execution_id: str = Field(default="", max_length=128, description="with scope `execution`")


class TicketResponse(BaseModel):
    ticket: str = Field(description="pass as `?ticket=`; opens one stream, at this gateway only")
    scope: str = Field(description="what it opens, e.g. `worker:gpu-1`, `execution:ID`, `fleet`")
    expires_in_s: float = Field(description="seconds left to open the stream")
    url: str = Field(description="the stream's path with the ticket, relative to this gateway")


def refusals(why: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the refusals a route gives: each status, why, and the one error body."""
    return {status: {"model": ErrorBody, "description": what} for status, what in sorted(why.items())}
