"""The core's spans of an execution, made only while tracing is on (flux/observe/tracing.py).

No span is held open while an execution waits: ``flux.queued`` is written when the
wait ends (at dispatch), starting when it began, so a queue of a million executions
costs a small record each (only while traced), a restart costs nothing but the
verdict events seen before it, and the replica that dispatches writes it.

Per dispatch, under the execution's stored context (``Execution.trace``):

- ``flux.queued``: from acceptance (or the requeue) to this dispatch; attributes
  ``flux.shape``, ``flux.queue.position`` (at acceptance), ``flux.attempt``; one event
  per explain verdict seen while it waited (``busy``, ``infeasible``, ``nominated``, ...).
- ``flux.dispatch``: the push to the worker, ``messaging``-style PRODUCER span; its
  context travels in ``ExecutionScheduled.trace``, so the worker's ``flux.claim``,
  ``flux.execute`` and ``flux.complete`` nest under it. A later attempt's
  ``flux.queued`` and ``flux.dispatch`` link to the previous dispatch.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from flux.domain.execution import Execution
from flux.matching import Shape
from flux.observe import tracing

# Waiting records kept at most (oldest dropped first): bounds memory on a replica that
# mirrors executions another replica then dispatches.
MAX_WAITING = 100_000

NANOS = 1_000_000_000


@dataclass(slots=True)
class _Waiting:
    since: float
    requeued: bool = False
    position: int | None = None
    verdicts: list[tuple[float, str, str]] = field(default_factory=list)  # (time, verdict, summary)


class CoreTraces:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self._waiting: OrderedDict[str, _Waiting] = OrderedDict()

    def accepted(self, execution: Execution) -> Execution:
        """A new submission; one without a caller's context gets its own trace here."""
        if execution.trace:
            return execution
        with tracing.span(
            "flux.submit",
            kind="SERVER",
            **{"flux.execution.id": execution.execution_id, "flux.workflow.name": execution.workflow.name},
        ) as span:
            return execution.evolve(trace=tracing.carrier_of(span))

    def waiting(self, execution: Execution, position: int | None, verdict: str, summary: str) -> None:
        """It is in line after a pass that could not place it, with this explain verdict."""
        record = self._waiting.get(execution.execution_id)
        if record is None:
            record = self._waiting[execution.execution_id] = _Waiting(
                self._since(execution), position=position
            )
            while len(self._waiting) > MAX_WAITING:
                self._waiting.popitem(last=False)
        if not record.verdicts or record.verdicts[-1][1] != verdict:
            record.verdicts.append((self.clock(), verdict, summary))

    def requeued(self, execution: Execution) -> None:
        """Back in line (a requeue, an expired ack): the next wait starts now."""
        if execution.trace:
            self._waiting[execution.execution_id] = _Waiting(self.clock(), requeued=True)

    def waiting_ids(self, most: int) -> list[str]:
        """The ``most`` longest-waiting traced executions, as far as this server knows."""
        return list(itertools.islice(self._waiting, most))

    def dropped(self, execution_id: str) -> None:
        self._waiting.pop(execution_id, None)

    def dispatched(self, execution: Execution, shape: Shape) -> Execution:
        """Write its wait and its dispatch; the execution with the dispatch's context to send."""
        if not execution.trace:
            return execution
        from opentelemetry.trace import SpanKind

        record = self._waiting.pop(execution.execution_id, None)
        since = self._since(execution)  # a replica's mirror learns of it later than it was accepted
        if record is not None:
            since = record.since if record.requeued else min(since, record.since)
        now = self.clock()
        parent = tracing.context_of(execution.trace)
        previous = tracing.link_to(execution.dispatch_trace)
        links = [previous] if previous is not None else None
        attributes = {
            "flux.execution.id": execution.execution_id,
            "flux.workflow.name": execution.workflow.name,
            "flux.workflow.version": execution.workflow.version,
            "flux.attempt": execution.attempt,
            "flux.generation": execution.generation,
            "flux.shape": str(shape),
            "flux.priority": execution.priority,
        }
        tracer = tracing.tracer()
        queued = tracer.start_span(
            "flux.queued",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
            start_time=int(min(since, now) * NANOS),
        )
        if record is not None:
            if record.position is not None:
                queued.set_attribute("flux.queue.position", record.position)
            for at, verdict, summary in record.verdicts:
                queued.add_event(
                    verdict, {"flux.verdict": verdict, "flux.summary": summary}, timestamp=int(at * NANOS)
                )
        queued.end(int(now * NANOS))
        dispatch = tracer.start_span(
            "flux.dispatch",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes={**attributes, "flux.worker": execution.worker},
            links=links,
            start_time=int(now * NANOS),
        )
        dispatch.end()
        return execution.evolve(dispatch_trace=tracing.carrier_of(dispatch))

    def _since(self, execution: Execution) -> float:
        return execution.created_at or self.clock()
