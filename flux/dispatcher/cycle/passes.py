"""When a scheduling pass runs, and over what: the one place that decides.

Every change that can let pending work run names itself here, by what it changed:

- ``work_added(shapes)``: executions of these shapes joined the queue (a submission, a
  requeue, a lost worker's work): a pass over those shapes, on the whole fleet;
- ``room_freed(workers)``: these workers can take more (one connected, reported, finished or
  released an execution, was resumed): a pass over the whole queue, on those workers;
- ``everything()``: what bounds every placement changed (a tenant gave back usage, tenants'
  terms changed, the housekeeping tick): one pass over all.

A trigger runs its pass at once, so a submission is dispatched before its call returns. The
submissions one commit lands are queued together, in one block, before any of their calls
resumes (modes/local.py): a burst of one-by-one calls gets a pass per commit, not per call.
Inside ``together()`` the triggers are gathered and run when the outermost block ends, as a
single pass over everything when one asked for it, else at most a pass over the shapes and a
pass over the workers: a batch of N completions on one worker runs one pass, not N + 1, and
a release (its execution back in line, its worker's room free) one pass per kind, not two
passes of each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.matching import Shape

# Dispatcher.place: one pass scoped to shapes or to workers (None: unscoped); how many placed.
Run = Callable[..., int]


class Passes:
    def __init__(self, run: Run):
        self._run = run
        self._depth = 0
        # Insertion-ordered sets: a gathered pass visits shapes and workers in trigger order.
        self._shapes: dict[Shape, None] = {}
        self._workers: dict[str, WorkerEntry] = {}
        self._everything = False

    def work_added(self, shapes: Iterable[Shape]) -> None:
        shapes = list(shapes)
        if not shapes:
            return
        if self._depth:
            self._shapes.update(dict.fromkeys(shapes))
        else:
            self._run(shapes=shapes)

    def room_freed(self, workers: Iterable[WorkerEntry]) -> None:
        workers = list(workers)
        if not workers:
            return
        if self._depth:
            self._workers.update((w.name, w) for w in workers)
        else:
            self._run(workers=workers)

    def everything(self) -> None:
        if self._depth:
            self._everything = True
        else:
            self._run()

    @contextmanager
    def together(self) -> Iterator[None]:
        """Run the passes the block triggers once, when the outermost block ends (also on an error:
        what changed before it still gets its pass)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._flush()

    def _flush(self) -> None:
        shapes, workers, everything = list(self._shapes), list(self._workers.values()), self._everything
        self._shapes, self._workers, self._everything = {}, {}, False
        if everything:
            self._run()
            return
        if shapes:
            self._run(shapes=shapes)
        if workers:
            self._run(workers=workers)
