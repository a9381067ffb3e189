"""Feasibility filters, in the order of DESIGN §3: labels, then quantities, then packages.

Two checks come before the labels: the runtime (a worker that cannot execute
the workflow's language never fits, whatever it offers) and a pause (an
operator's hold, which says nothing about what the worker could run).

Each filter is a pure function ``(shape, view, room) -> Rejection | None``.
A filter names everything it finds wrong (every missing label, every unmet
package) in its one rejection, so ``explain`` can tell the whole story.
``view`` holds what never changes within a cycle (totals, labels, software);
``room`` the free space left after this cycle's earlier placements. A
rejection is *permanent* when the worker could not take the execution even
idle; otherwise the worker is merely busy.
"""

from __future__ import annotations

from collections.abc import Callable

from flux.domain.quantity import format_bytes
from flux.matching.packages import unmet
from flux.matching.reasons import Reason, Rejection
from flux.matching.shape import Shape
from flux.matching.view import Room, WorkerView

Filter = Callable[[Shape, WorkerView, Room], Rejection | None]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _bytes(value: int, other: int) -> str:
    """``format_bytes``, but exact when rounding would make two different amounts read the same."""
    text = format_bytes(value)
    return f"{value} B" if value != other and text == format_bytes(other) else text


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _clauses(clauses: list[tuple[str, str]]) -> tuple[str, str]:
    """Join (singular, plural) clauses: "lacks label a=1, and has label b=2, not b=3"."""
    return ", and ".join(c[0] for c in clauses), ", and ".join(c[1] for c in clauses)


def runtime(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    if shape.runtime in view.software.runtime_names:
        return None
    offered = ", ".join(view.software.runtimes) or "none"
    return Rejection(
        Reason.RUNTIME,
        True,
        shape.runtime,
        offered,
        f"lacks runtime {shape.runtime} (runs {offered})",
        f"lack runtime {shape.runtime}",
    )


def paused(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    if not room.paused:
        return None
    return Rejection(Reason.PAUSED, False, "an active worker", "paused", "is paused", "are paused")


def own_queue(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    """A pipelining worker with executions in its own queue: those start first, and the server
    refills the queue rather than its room (flux/matching/prefetch.py)."""
    if not room.queued:
        return None
    held = f"{room.queued} queued"
    return Rejection(
        Reason.QUEUE,
        False,
        "an empty queue",
        held,
        f"has {held} ahead (its own queue goes first)",
        f"have {held} ahead (their own queues go first)",
    )


def labels(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    missing: list[str] = []
    clauses: list[tuple[str, str]] = []
    wanted_all: list[str] = []
    offered_all: list[str] = []
    for key, wanted in shape.affinity:
        offered = view.labels.get(key)
        if offered == wanted:
            continue
        wanted_all.append(f"{key}={wanted}")
        offered_all.append(f"{key}={offered or ''}")
        if offered is None:
            missing.append(f"{key}={wanted}")
        else:
            text = f"label {key}={offered}, not {key}={wanted}"
            clauses.append((f"has {text}", f"have {text}"))
    if not wanted_all:
        return None
    if missing:
        text = f"label {_and(missing)}"
        clauses.insert(0, (f"lacks {text}", f"lack {text}"))
    detail, plural = _clauses(clauses)
    return Rejection(Reason.LABEL, True, ", ".join(wanted_all), ", ".join(offered_all), detail, plural)


def capacity(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    if room.active < room.capacity:
        return None
    used = f"{room.active}/{room.capacity} executions"
    return Rejection(
        Reason.CAPACITY,
        room.capacity <= 0,
        f"1 of {room.capacity} slots",
        used,
        f"is at capacity ({used})",
        f"are at capacity ({used})",
    )


def _has(reason: Reason, permanent: bool, wanted: str, offered: str, text: str) -> Rejection:
    """A rejection phrased "has …" / "have …" for the per-worker detail and the summary."""
    return Rejection(reason, permanent, wanted, offered, f"has {text}", f"have {text}")


def _limited(view: WorkerView, resource: str) -> str:
    """`` (cgroup cpu.max; host has 64)`` when a limit below the host set the total, else ``""``.

    Said where a total is too small, so "has only 2 cores" on a 64-core host
    points at the container, not the machine.
    """
    limit = view.resources.limit_of(resource)
    if limit is None:
        return ""
    host = format_bytes(limit.host) if resource == "memory" else str(limit.host)
    return f" ({limit.source}; host has {host})"


def cpu(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    wanted = shape.requests.cpu
    if not wanted or room.cpu >= wanted:
        return None
    total = view.resources.cpu_total
    if total < wanted:
        text = f"only {_plural(total, 'core')}{_limited(view, 'cpu')}"
        return _has(Reason.CPU, True, _plural(wanted, "core"), f"{total} total", text)
    text = f"{room.cpu} of {_plural(total, 'core')} free"
    return _has(Reason.CPU, False, _plural(wanted, "core"), f"{room.cpu} free", text)


def _bytes_rejection(
    reason: Reason, noun: str, wanted: int, free: int, total: int, limited: str = ""
) -> Rejection:
    if total < wanted:
        shown = _bytes(total, wanted)
        return _has(reason, True, _bytes(wanted, total), f"{shown} total", f"only {shown} {noun}{limited}")
    shown = _bytes(free, wanted)
    return _has(
        reason, False, _bytes(wanted, free), f"{shown} free", f"{shown} of {format_bytes(total)} {noun} free"
    )


def memory(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    wanted = shape.requests.memory
    if not wanted or room.memory >= wanted:
        return None
    return _bytes_rejection(
        Reason.MEMORY, "memory", wanted, room.memory, view.resources.memory_total, _limited(view, "memory")
    )


def gpu(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    wanted = shape.requests.gpu
    if not wanted or len(room.gpus) >= wanted:
        return None
    count = len(view.resources.gpus)
    need = _plural(wanted, "GPU")
    if count == 0:
        return Rejection(Reason.GPU, True, need, "no GPUs", "has no GPUs", "have no GPUs")
    if count < wanted:
        return _has(Reason.GPU, True, need, f"{count} total", f"only {_plural(count, 'GPU')}")
    free = len(room.gpus)
    return _has(Reason.GPU, False, need, f"{free} free", f"{free} of {_plural(count, 'GPU')} free")


def gpu_memory(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    """Each assigned GPU must have ``gpu_memory`` free; a GPU count short is ``gpu``'s to say."""
    r = shape.requests
    wanted, vram = r.gpu, r.gpu_memory
    if not vram:
        return None
    amount = format_bytes(vram)
    need = f"{_plural(wanted, 'GPU')} with {amount} free"
    large = sum(total >= vram for total in view.profile.gpu_memory_totals)
    if large < wanted <= len(view.resources.gpus):
        # Enough devices, too small even empty: more VRAM never frees up than a device has.
        # Said even while the devices are busy, so explain calls it infeasible.
        shown = f"no GPU with {amount}" if not large else f"only {_plural(large, 'GPU')} with {amount}"
        return _has(Reason.GPU_MEMORY, True, need, f"{large} with {amount} total", f"{shown} total")
    if len(room.gpus) < wanted:
        return None
    eligible = len(room.gpus_with(vram))
    if eligible >= wanted:
        return None
    shown = (
        f"no GPU with {amount} free"
        if not eligible
        else f"only {_plural(eligible, 'GPU')} with {amount} free"
    )
    return _has(Reason.GPU_MEMORY, False, need, f"{eligible} with {amount} free", shown)


def disk(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    wanted = shape.requests.disk
    if not wanted or room.disk >= wanted:
        return None
    return _bytes_rejection(Reason.DISK, "disk", wanted, room.disk, view.resources.disk_total)


def packages(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    if not shape.requirements:
        return None
    found = list(unmet(shape.requirements, view.software))
    if not found:
        return None
    missing = [str(requirement) for requirement, installed in found if installed is None]
    clauses: list[tuple[str, str]] = []
    offered: list[str] = []
    for requirement, installed in found:
        if installed is None:
            offered.append(f"{requirement.name} not installed")
        else:
            offered.append(f"{requirement.name} {installed}")
            text = f"{requirement.name} {installed}, not {requirement}"
            clauses.append((f"has {text}", f"have {text}"))
    if missing:
        clauses.append((f"lacks {_and(missing)}", f"lack {_and(missing)}"))
    detail, plural = _clauses(clauses)
    wanted = ", ".join(str(requirement) for requirement, _ in found)
    # One missing package keeps the short form the wire has always carried.
    shown = "not installed" if len(found) == 1 and missing else ", ".join(offered)
    return Rejection(Reason.PACKAGE, True, wanted, shown, detail, plural)


# DESIGN §3 order: labels first, then quantities, packages last (the costliest).
# Capacity sits with the quantities: it is one more thing a busy worker lacks.
# The runtime goes before everything: no amount of room makes up for it.
FILTERS: tuple[Filter, ...] = (
    runtime,
    paused,
    own_queue,
    labels,
    capacity,
    cpu,
    memory,
    gpu,
    gpu_memory,
    disk,
    packages,
)


def rejections(shape: Shape, view: WorkerView, room: Room | None = None) -> list[Rejection]:
    """Every reason ``view`` cannot take ``shape`` now, in filter order; empty when it fits."""
    room = room or Room(view)
    return [r for check in FILTERS if (r := check(shape, view, room)) is not None]


def permanent_rejection(shape: Shape, view: WorkerView) -> Rejection | None:
    """The first reason the worker could never take ``shape``, judged as if idle."""
    idle = _IdleRoom(view)
    for check in FILTERS:
        rejection = check(shape, view, idle)
        if rejection is not None and rejection.permanent:
            return rejection
    return None


def fits_now(shape: Shape, room: Room) -> bool:
    """The quantity part of the filters, inlined: the scheduler's hot path.

    Labels and packages are permanent, so the scheduler checks them once per
    (shape, profile) through ``permanent_rejection`` and only this runs per
    placement. Property tests assert it agrees with ``rejections``.
    """
    r = shape.requests
    return (
        room.active < room.capacity
        and not room.paused
        and not room.queued
        and room.cpu >= r.cpu
        and room.memory >= r.memory
        and room.disk >= r.disk
        and len(room.gpus) >= r.gpu
        and (not r.gpu_memory or len(room.gpus_with(r.gpu_memory)) >= r.gpu)
        # A nominated worker takes only what fits beside its nominee (aging's backfill rule).
        and (room.slack is None or fits_beside(shape, room.slack))
    )


def fits_beside(shape: Shape, slack: Room) -> bool:
    """``shape`` leaves room for a nominee: ``slack`` is what the worker has once the nominee is
    counted in (``flux.matching.aging.slack_beside``); a figure the shape does not ask for never binds.
    """
    r = shape.requests
    return (
        slack.active < slack.capacity
        and (not r.cpu or slack.cpu >= r.cpu)
        and (not r.memory or slack.memory >= r.memory)
        and (not r.disk or slack.disk >= r.disk)
        and (not r.gpu or len(slack.gpus_with(r.gpu_memory)) >= r.gpu)
    )


class _IdleRoom(Room):
    """The worker as if nothing ran on it and every GPU were free: all of its totals."""

    def __init__(self, view: WorkerView):
        res = view.resources
        self.view = view
        self.slack = None
        self.cpu = res.cpu_total
        self.memory = res.memory_total
        self.disk = res.disk_total
        # Judged as if empty: every GPU offers its whole VRAM.
        self.gpus = [g.index for g in sorted(res.gpus, key=lambda g: (-g.memory_total, g.index))]
        self.vram = {g.index: g.memory_total for g in res.gpus}
        self.active = 0
        self.capacity = view.capacity
        self.cpu_total = res.cpu_total
        self.paused = False  # judged as if idle and running: a pause is never permanent
        self.queued = 0
        self.key = self._load_key()
