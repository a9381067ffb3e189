"""``flux start server --infeasible-after DURATION``: work nothing could ever run ends FAILED.

An execution is *infeasible* when explain says so (no connected worker of the fleet, every
replica's, could run it even idle) and no declared or learned pool could run it either (a
pool scaled to zero is a place it could still go). Off by default: then the verdict is only
said (``flux execution explain``, ``flux status``), as before.

Feasibility belongs to a shape and the fleet, not to one execution, so it is kept per shape:
``since`` is when each waiting shape was last seen to become infeasible. It is re-evaluated when
the fleet changes (a worker connects, leaves, reports other labels, pauses or resumes), when pools
are declared or re-read, when a shape not seen before is queued, and at every full pass of the
housekeeping tick (changes made on another replica). A shape that becomes feasible drops out of
``since``, so nothing of it is failed; should it become infeasible again, its clock starts over.

One timer per shape, in the dispatcher's one timer heap (``Kind.INFEASIBLE``, its token naming
the shape's entry): when it fires, the fleet is evaluated again first, then each execution of the
shape that has been infeasible for the whole duration (since the later of the shape's ``since``
and the time it last went back to CREATED) ends FAILED with reason ``pending_timeout`` (DESIGN §10
has no other reason for it) and explain's last verdict as its error; the timer is armed again for
the next one due.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, Any

from flux.dispatcher.state.deadlines import Kind
from flux.dispatcher.transitions.attempts import never_started
from flux.domain.execution import ExecutionError, State
from flux.domain.policy import format_duration
from flux.matching import explain
from flux.observe.fleet import Change

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.matching import Shape

log = logging.getLogger("flux.dispatcher")


class Infeasibility:
    def __init__(self, d: Handle):
        self.d = d
        # Shape -> when it was last seen to become infeasible (loop clock: ``d.clock``).
        self.since: dict[Shape, float] = {}
        # Shape -> explain's last verdict on it (the error of what it fails).
        self.verdicts: dict[Shape, str] = {}
        # Timer token -> the shape it was armed for; a token whose shape dropped out is skipped.
        self._armed: dict[int, Shape] = {}
        self._tokens = itertools.count(1)
        self._seen: set[Shape] = set()  # the shapes of the last evaluation
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._unsubscribe: Any = None

    @property
    def after(self) -> float:
        return self.d.settings.infeasible_after

    def start(self) -> None:
        if self.after > 0 and self._unsubscribe is None:
            self._unsubscribe = self.d.events.fleet.subscribe(self._on_change)
            self.changed()

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _on_change(self, change: Change, subject: Any) -> None:
        if change.about_worker:
            self.changed()
        elif change is Change.EXECUTION_QUEUED and subject is not None:
            try:
                shape = self.d.catalogue.shape_of(subject)
            except Exception:  # a workflow not learned yet: the next tick evaluates it
                return
            if shape not in self._seen:
                self.changed()

    def changed(self) -> None:
        """The fleet, the pools or the waiting shapes may differ: evaluate again, one run at a time."""
        if self.after <= 0:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        try:
            self._task = asyncio.get_running_loop().create_task(self._run())
        except RuntimeError:  # no loop (a pure test): evaluate() is called directly
            return

    def fire(self, token: int) -> bool:
        """Its timer came due: evaluate against the fleet as it is now, then fail what is due."""
        if token in self._armed:
            self.changed()
        return False

    async def _run(self) -> None:
        while True:
            self._again = False
            try:
                await self.evaluate()
            except Exception:  # a replica's database hiccup: the next change or tick tries again
                log.exception("infeasible work could not be evaluated")
            if not self._again:
                return

    async def evaluate(self) -> None:
        d = self.d
        entries = await d.fleet.entries()
        demand = await d.pools.demand(d)
        views = [entry.view() for entry in entries if entry.accepting]
        now = d.clock()
        shapes = d.queue.shapes()
        self._seen = set(shapes)
        for shape in shapes:
            why = explain(shape, views)
            if not why.infeasible or d.pools.could_run(shape, demand):
                self.since.pop(shape, None)
                self.verdicts.pop(shape, None)
                continue
            self.verdicts[shape] = why.summary
            if shape not in self.since:
                self.since[shape] = now
                self._arm(shape, now + self.after)
        for shape in [s for s in self.since if s not in self._seen]:
            del self.since[shape]
            self.verdicts.pop(shape, None)
        self._armed = {token: shape for token, shape in self._armed.items() if shape in self.since}
        self.fail_due(now)

    def fail_due(self, now: float) -> None:
        """Fail every execution infeasible for the whole duration; arm the next of each shape."""
        d, after = self.d, self.after
        failed = 0
        for shape, since in list(self.since.items()):
            due_next = None
            for pending in list(d.queue.iter_shape(shape)):
                execution = d.table.get(pending.execution_id)
                if execution is None or execution.state is not State.CREATED:
                    continue
                due = max(since, execution.updated_at) + after
                if due > now:
                    due_next = due if due_next is None else min(due_next, due)
                    continue
                verdict = self.verdicts.get(shape, "no connected worker could ever run it")
                never_started(
                    d,
                    execution,
                    ExecutionError(
                        "Infeasible",
                        f"infeasible for {format_duration(after)} (--infeasible-after): {verdict}",
                    ),
                )
                failed += 1
            if due_next is not None:
                self._arm(shape, due_next)
        if failed:
            log.info("%d executions infeasible for %s failed", failed, format_duration(after))

    def _arm(self, shape: Shape, due: float) -> None:
        token = next(self._tokens)
        self._armed = {t: s for t, s in self._armed.items() if s != shape}
        self._armed[token] = shape
        self.d.timers.arm(Kind.INFEASIBLE, "", token, due)


__all__ = ["Infeasibility"]
