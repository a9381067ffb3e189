"""Aging: a nominated worker for an execution that has waited too long, and backfill beside it.

Without this, a steady stream of small work can keep taking the room a big
execution needs for ever: each time one core frees on a 4-core worker, a
``cpu=1`` execution takes it, and the ``cpu=4`` one never sees 4 free.

The rule (after the Kubernetes scheduler's nominated node, with Slurm's
backfill in mind):

- When the oldest pending execution of a shape has waited ``after`` seconds or
  more, it is *starving*. If it fits some worker now it is placed there first,
  ahead of any priority. Otherwise it is *nominated* a worker: among the
  workers that could run it idle (feasible, not just free now), the one with
  the least to free before it fits.
- On the nominated worker, anything else is placed only if it fits *beside*
  the nominee: for every resource both ask for, the worker's reservations
  plus the newcomer plus the nominee stay within its total (and one slot is
  left for the nominee). That is backfill, and it never delays the nominee:
  whatever the newcomer takes, the nominee either does not need or has room
  for whenever it would otherwise have started. A ``cpu=1`` execution still
  runs beside a ``gpu=1`` nominee waiting for the GPU; on a 4-core worker
  nominated for a ``cpu=4`` execution nothing new needing cores goes.
  Everything else keeps flowing to other workers.
- When the worker has room, the nominee is placed there before anything else.

Nominations outlive a pass (the dispatcher keeps one ``Aging``) so a worker
stays guarded between passes; they are recomputed on every pass, oldest
starving execution first, and dropped once their execution is placed or gone.
Only one execution is nominated per worker; the next starving one waits for
the next worker or the next pass. A starving gang is nominated a worker per
member, all at once or none (``flux.matching.gang_aging``).
"""

from __future__ import annotations

from dataclasses import dataclass

from flux import defaults
from flux.matching.queue import Pending
from flux.matching.shape import Shape
from flux.matching.view import Room, WorkerView

DEFAULT_STARVATION_AFTER = defaults.STARVATION_AFTER


@dataclass(frozen=True, slots=True)
class Nomination:
    execution_id: str
    worker: str
    shape: Shape
    # When the nominee started waiting (its submission time).
    waiting_since: float
    # When the worker was first nominated for it.
    nominated_at: float
    # A gang's: a worker per member, ``worker`` the first (``flux.matching.gang_aging``).
    members: tuple[str, ...] = ()

    @property
    def workers(self) -> tuple[str, ...]:
        """Every worker it guards: a gang's members, or its one worker."""
        return self.members or (self.worker,)


class Aging:
    """Nominations across passes, keyed both ways; ``after`` <= 0 disables aging."""

    # A pass over at most this many workers (a worker that freed room) always searches in full.
    SMALL_PASS = 64

    def __init__(self, after: float = DEFAULT_STARVATION_AFTER) -> None:
        self.after = after
        self.by_execution: dict[str, Nomination] = {}
        self.by_worker: dict[str, Nomination] = {}
        # Searching every capable worker for every starving execution costs O(workers) each;
        # on a big fleet that is done at most this often, and in between only the standing
        # nominations are kept and tried (O(nominations)).
        self.search_every = max(0.05, min(1.0, after / 10))
        self.next_search = float("-inf")

    @property
    def enabled(self) -> bool:
        return self.after > 0

    def nominate(self, nomination: Nomination) -> None:
        self.drop(nomination.execution_id)
        self.by_execution[nomination.execution_id] = nomination
        for worker in nomination.workers:
            self.by_worker[worker] = nomination

    def drop(self, execution_id: str) -> None:
        old = self.by_execution.pop(execution_id, None)
        if old is None:
            return
        for worker in old.workers:
            if self.by_worker.get(worker) is old:
                del self.by_worker[worker]

    def starving(self, item: Pending, now: float) -> bool:
        return self.enabled and now - item.since >= self.after


class BookedRoom(Room):
    """A worker's totals minus what its executions reserve, ignoring observed usage.

    The nominee's promise is about reservations: once the work reserved here
    ends, it fits. Observed load from outside Flux can delay it still, and no
    placement rule can change that.
    """

    def __init__(self, view: WorkerView):
        res = view.resources
        self.view = view
        self.slack = None
        self.paused = False
        self.queued = 0  # by reservations only: a queued execution holds none
        self.cpu = res.cpu_total - view.reserved.cpu
        self.memory = res.memory_total - view.reserved.memory
        self.disk = res.disk_total - view.reserved.disk
        free = [g for g in res.gpus if g.index not in view.held_gpus]
        free.sort(key=lambda g: (-g.memory_total, g.index))
        self.gpus = [g.index for g in free]
        self.vram = {g.index: g.memory_total for g in free}
        self.active = view.active
        self.capacity = view.capacity
        self.cpu_total = res.cpu_total
        self.key = self._load_key()


def slack_beside(view: WorkerView, nominee: Shape, now: Room | None = None) -> Room:
    """What ``view`` has for others once ``nominee`` is counted in, by reservations.

    A figure may go negative: the nominee needs more of it than is unreserved
    yet, so anything that also needs it would delay the nominee. Figures the
    nominee does not need never bind (``fits_beside`` skips what the newcomer
    does not ask for). ``now`` is the worker's room in the current pass: what
    was placed there earlier in the pass counts as reserved too.
    """
    room = BookedRoom(view)
    if now is not None:
        room.cpu -= view.free_cpu - now.cpu
        room.memory -= view.free_memory - now.memory
        room.disk -= view.free_disk - now.disk
        room.active += now.active - view.active
        taken = set(view.free_gpus) - set(now.gpus)
        room.gpus = [index for index in room.gpus if index not in taken]
    r = nominee.requests
    room.take(r.cpu, r.memory, r.disk, r.gpu, r.gpu_memory)
    return room


def shortfall(shape: Shape, room: Room) -> tuple[float, int, str]:
    """How far ``room`` is from fitting ``shape`` (fractions of each total short), then load, then name.

    The worker with the smallest shortfall is where the nominee fits soonest,
    in the sense of the least to free.
    """
    r = shape.requests
    view = room.view
    res = view.resources

    def short(need: int, free: int, total: int) -> float:
        return max(0, need - free) / total if total > 0 and need > free else 0.0

    missing = (
        short(r.cpu, room.cpu, res.cpu_total)
        + short(r.memory, room.memory, res.memory_total)
        + short(r.disk, room.disk, res.disk_total)
        + short(r.gpu, len(room.gpus_with(r.gpu_memory)), len(res.gpus))
        + short(1, room.capacity - room.active, room.capacity)
    )
    return (missing, room.active, view.name)


def format_wait(seconds: float) -> str:
    """``45s``, ``2m``, ``1h 5m``: how long something has waited, to the unit that matters."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m" if minutes else f"{hours}h"
