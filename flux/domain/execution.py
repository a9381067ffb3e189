"""An execution's record and its lifecycle (DESIGN §4).

CREATED -> SCHEDULED (dispatched, resources reserved) -> RUNNING (claimed)
-> COMPLETED | FAILED; CANCELLED from any unfinished state. A dispatch that is
not claimed in time, or a worker lost past its grace period, sends it back to
CREATED. Every dispatch bumps ``generation``; claims and results quoting an
older one are refused.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from flux.domain.gang import GangRun
from flux.domain.policy import Attempt, Policy, default_policy

if TYPE_CHECKING:  # the wire types load only where a conversion runs (the edges)
    from collections.abc import Callable, Iterable

    from flux.v1 import worker_pb2


class State(IntEnum):
    # Values equal flux.v1.ExecutionState, so conversion is int() both ways.
    CREATED = 1
    SCHEDULED = 2
    RUNNING = 3
    COMPLETED = 4
    FAILED = 5
    CANCELLED = 6

    @property
    def finished(self) -> bool:
        return self >= State.COMPLETED

    @property
    def label(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class ExecutionError:
    type: str
    message: str
    traceback: str = ""
    # The names of the type's bases, nearest first: a retry policy's names match these too.
    bases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The type's name and its bases' names, what ``Retry.retries`` is asked about."""
        return (self.type.rpartition(".")[2], *self.bases)

    def to_proto(self) -> worker_pb2.ExecutionError:
        from flux.v1 import worker_pb2

        return worker_pb2.ExecutionError(
            type=self.type, message=self.message, traceback=self.traceback, bases=list(self.bases)
        )

    @classmethod
    def from_proto(cls, message: worker_pb2.ExecutionError) -> ExecutionError:
        return cls(message.type, message.message, message.traceback, tuple(message.bases))


def utf8_bytes(text: str) -> int:
    """What ``text`` takes on the wire and in the store: its UTF-8 bytes, not its characters
    (one emoji is 4 bytes). ``isascii`` is O(1) on CPython, so ASCII text costs no encoding."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def result_bytes(output_json: str | None, error: ExecutionError | None) -> int:
    """The bytes a result holds: its output, or its error's message and traceback."""
    size = utf8_bytes(output_json or "")
    return size + (utf8_bytes(error.message) + utf8_bytes(error.traceback) if error is not None else 0)


@dataclass(frozen=True, slots=True)
class WorkflowRef:
    name: str
    version: int
    source_hash: str
    entrypoint: str

    def to_proto(self) -> worker_pb2.WorkflowRef:
        from flux.v1 import worker_pb2

        return worker_pb2.WorkflowRef(
            name=self.name, version=self.version, source_hash=self.source_hash, entrypoint=self.entrypoint
        )

    @classmethod
    def from_proto(cls, message: worker_pb2.WorkflowRef) -> WorkflowRef:
        return cls(message.name, message.version, message.source_hash, message.entrypoint)


@dataclass(frozen=True, slots=True)
class Execution:
    execution_id: str
    workflow: WorkflowRef
    seq: int
    input_json: str
    max_attempts: int
    state: State = State.CREATED
    worker: str = ""
    attempt: int = 1
    generation: int = 0
    output_json: str = ""
    error: ExecutionError | None = None
    gpu_indices: tuple[int, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0
    # Higher is dispatched first among executions competing for a worker (FIFO among equals).
    priority: int = 0
    # The tenant that submitted it (flux.domain.tenant): who may see it, whose quota it counts on.
    tenant: str = "default"
    # The W3C trace context its submission came with ("traceparent[ tracestate]"; flux/observe/tracing.py),
    # stored with it so its trace survives a restart and a move between replicas; "" untraced.
    trace: str = ""
    # The context of its latest dispatch span: a requeue's next attempt links to it. Memory only.
    dispatch_trace: str = ""
    # Its timeouts and retries (flux.domain.policy); None: the default with ``max_attempts``.
    policy: Policy | None = None
    # Not dispatched before this (seconds since the epoch): a retry's backoff, stored, so a
    # restart or another replica waits out the same wait, never a new one. 0: at once.
    not_before: float = 0.0
    # Why it FAILED (policy.FAILURE_REASONS); "" otherwise.
    reason: str = ""
    # Its ended attempts, oldest first.
    attempts: tuple[Attempt, ...] = ()
    # The latest heartbeat's details, JSON; given to the next attempt as ctx.last_heartbeat.
    heartbeat: str = ""
    # When its current attempt was claimed (0 while none runs), and the run time of its preempted
    # attempts, which counts against the timeout of the next (as Kueue counts it).
    started_at: float = 0.0
    run_time: float = 0.0
    # Its resolved flow-control keys, (part, key) sorted by part ("concurrency", "limits",
    # "rate_limit"); empty: unlimited. A tuple, so the record stays hashable.
    flow_keys: tuple[tuple[str, str], ...] = ()
    # A gang's size and, once placed, its members, claims and outputs (flux.domain.gang); None:
    # one worker.
    gang: GangRun | None = None
    # The batch it belongs to (flux/domain/batch.py); "" for none.
    batch_id: str = ""
    # The executions it waits for, and how they must end (flux.domain.dependencies.WHENS); ""
    # when it waits for none. ``waiting``: how many of them have not yet ended as ``when`` asks;
    # while above 0 it is held out of the queue (flux/dispatcher/state/dependencies.py).
    after: tuple[str, ...] = ()
    when: str = ""
    waiting: int = 0
    # Its dependencies' outputs, (id, output JSON), read on its way to a worker (ctx.upstream). Memory only.
    upstream: tuple[tuple[str, str], ...] = ()

    @property
    def effective_policy(self) -> Policy:
        return self.policy if self.policy is not None else default_policy(self.max_attempts)

    def evolve(self, **changes: object) -> Execution:
        """A copy with ``changes``: ``dataclasses.replace`` without its trip through ``__init__``,
        which sets each of a frozen class's fields through ``object.__setattr__`` (a few evolves per
        execution on the dispatcher's hot path). The copy is filled in as a ``_Draft`` (below)."""
        values = list(_execution_values(self))
        for name, value in changes.items():
            index = _FIELD_INDEX.get(name)
            if index is None:
                raise TypeError(f"Execution has no field {name!r}")
            values[index] = value
        return _made(values)

    def moved_from(self, earlier: Execution) -> bool:
        """Whether a watcher that saw ``earlier`` has news in this state (not just a rewrite)."""
        return (self.state, self.worker, self.attempt, self.generation) != (
            earlier.state,
            earlier.worker,
            earlier.attempt,
            earlier.generation,
        )


class _Draft:
    """An ``Execution``'s slots, in the same order, without the frozen class's ``__setattr__``.

    ``evolve`` and a bulk submission's copies (``Copier``) run for every execution. They fill a
    copy in as one of these, by plain attribute stores, then make it an ``Execution``: Python
    allows the class change between classes whose slots are the same. The other way into a frozen
    slotted class, each slot's descriptor ``__set__`` called in turn, costs about twice as much
    (2.9 µs against 1.4 µs for a 32-field copy on the reference box).
    """

    __slots__ = Execution.__slots__


_EXECUTION_FIELDS = tuple(field.name for field in fields(Execution))
_FIELD_INDEX = {name: index for index, name in enumerate(_EXECUTION_FIELDS)}
_execution_values = operator.attrgetter(*_EXECUTION_FIELDS)


def _compiled(name: str, source: str) -> Callable[..., Any]:
    """The function ``name`` defined by ``source`` (generated here, as ``dataclasses`` generates
    ``__init__``: a statement per field, no loop over descriptors)."""
    namespace: dict[str, Any] = {"Draft": _Draft, "Execution": Execution, "new": object.__new__}
    exec(compile(source, f"<flux.domain.execution.{name}>", "exec"), namespace)  # noqa: S102
    return namespace[name]


def _stores(names: Iterable[str]) -> str:
    """The targets of one unpacking assignment that sets ``names`` on ``copy``."""
    return "(" + "".join(f"copy.{name}, " for name in names) + ")"


# An Execution with every field from ``values``, in field order.
_made: Callable[[list[object]], Execution] = _compiled(
    "made",
    f"""def made(values):
    copy = new(Draft)
    {_stores(_EXECUTION_FIELDS)} = values
    copy.__class__ = Execution
    return copy
""",
)


def copies(
    template: Execution, names: tuple[str, ...], rows: Iterable[tuple[object, ...]]
) -> list[Execution]:
    """``[template.evolve(**dict(zip(names, row))) for row in rows]``, for many at once (a bulk
    submission's members): the fields they share are looked up once, not per copy."""
    return Copier(template, names).many(rows)


class Copier:
    """Makes copies of ``template`` with the fields ``names`` set from each row (``evolve`` for
    many: the shared values looked up once, each copy filled in by generated stores)."""

    __slots__ = ("_fixed", "_many")

    def __init__(self, template: Execution, names: tuple[str, ...]):
        if len(set(names)) != len(names) or not set(names) <= _FIELD_INDEX.keys():
            raise TypeError(f"Execution fields named twice or unknown: {names!r}")
        fixed = tuple(name for name in _EXECUTION_FIELDS if name not in names)
        self._fixed = tuple(getattr(template, name) for name in fixed)
        self._many = _copier(fixed, names)

    def __call__(self, row: tuple[object, ...]) -> Execution:
        return self._many((row,), self._fixed)[0]

    def many(self, rows: Iterable[tuple[object, ...]]) -> list[Execution]:
        return self._many(rows, self._fixed)


@functools.cache
def _copier(fixed: tuple[str, ...], varying: tuple[str, ...]) -> Callable[..., list[Execution]]:
    """``many(rows, values)``: a copy per row, ``fixed`` set from ``values`` and ``varying`` from the row."""
    return _compiled(
        "many",
        f"""def many(rows, values):
    made = []
    append = made.append
    for row in rows:
        copy = new(Draft)
        {_stores(fixed)} = values
        {_stores(varying)} = row
        copy.__class__ = Execution
        append(copy)
    return made
""",
    )
