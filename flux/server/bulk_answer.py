"""RunWorkflows' answer to a bulk call, the same message as one ``execution_to_proto`` per member,
built for a fraction of the cost.

The members of one call share almost everything: workflow, policy, tenant, priority, batch,
creation time, state. So each run of members alike in every answered field but their id is
encoded once (``execution_to_proto`` of the first, less its id and input), and each member is
its id's bytes before those shared bytes; the call's bytes are parsed as one message (in C).
Protobuf reads fields in any order, so the message is the one the per-member conversion makes.
A member that differs (already dispatched, its own flow-control key) starts a new run: at worst
one conversion per member, as before. For 10,000 members, 2 ms against 150 ms.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from flux.domain.execution import Execution
from flux.server.convert import accepted_to_proto, execution_to_proto
from flux.v1 import control_pb2

# Every field execution_to_proto answers but the id and the input (left out of the answer).
_ANSWERED = operator.attrgetter(
    "workflow", "state", "worker", "attempt", "generation", "output_json", "error", "gpu_indices",
    "created_at", "updated_at", "priority", "tenant", "reason", "attempts", "not_before", "heartbeat",
    "policy", "started_at", "flow_keys", "gang", "batch_id", "after", "when", "waiting",
)  # fmt: skip

_TAG = b"\n"  # field 1, length-delimited: Execution.execution_id, RunWorkflowsResponse.executions


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def bulk_answer(executions: Sequence[Execution], batch_id: str = "") -> control_pb2.RunWorkflowsResponse:
    """``RunWorkflowsResponse(executions=[execution_to_proto(e without its input) …], batch_id=…)``."""
    parts: list[bytes] = []
    shared = b""
    alike: tuple[object, ...] | None = None
    heads: dict[int, bytes] = {}  # an id's length -> the bytes before it (both tags and lengths)
    for execution in executions:
        answered = _ANSWERED(execution)
        if answered != alike:
            alike = answered
            shared = execution_to_proto(execution.evolve(execution_id="", input_json="")).SerializeToString()
            heads = {}
        identity = execution.execution_id.encode()
        head = heads.get(len(identity))
        if head is None:
            inner = len(identity)
            size = 1 + len(_varint(inner)) + inner + len(shared)
            head = heads[len(identity)] = _TAG + _varint(size) + _TAG + _varint(inner)
        parts.append(head + identity + shared)
    answer = control_pb2.RunWorkflowsResponse.FromString(b"".join(parts))
    answer.batch_id = batch_id
    return answer


# Every field accepted_to_proto answers but the id, the dependencies and how many still wait.
_ACCEPTED = operator.attrgetter(
    "workflow", "state", "worker", "generation", "attempt", "created_at", "updated_at", "priority",
    "tenant", "reason", "when", "error",
)  # fmt: skip
_AFTER = b"\xa2\x06"  # Execution.after (100), length-delimited
_WAITING = b"\xb0\x06"  # Execution.dependencies_waiting (102), a varint


def graph_answer(executions: Sequence[Execution]) -> control_pb2.RunWorkflowsResponse:
    """``RunWorkflowsResponse(executions=[accepted_to_proto(e) …])`` for a graph, as ``bulk_answer``
    builds its answer: the fields a run of items shares encoded once, each item's id, dependencies
    and count still waiting before them."""
    parts: list[bytes] = []
    shared = b""
    alike: tuple[object, ...] | None = None
    for execution in executions:
        answered = _ACCEPTED(execution)
        if answered != alike:
            alike = answered
            bare = execution.evolve(execution_id="", after=(), waiting=0)
            shared = accepted_to_proto(bare).SerializeToString()
        identity = execution.execution_id.encode()
        body = [_TAG, _varint(len(identity)), identity]
        for dependency in execution.after:
            encoded = dependency.encode()
            body += (_AFTER, _varint(len(encoded)), encoded)
        if execution.waiting:
            body += (_WAITING, _varint(execution.waiting))
        body.append(shared)
        item = b"".join(body)
        parts += (_TAG, _varint(len(item)), item)
    return control_pb2.RunWorkflowsResponse.FromString(b"".join(parts))
