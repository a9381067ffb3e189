"""Feasibility filters, in the order of DESIGN §3: labels, then quantities, then packages.

Two checks come before the labels: the runtime (a worker that cannot execute
the workflow's language never fits, whatever it offers) and a pause (an
operator's hold, which says nothing about what the worker could run).

Each filter is a pure function ``(shape, view, room) -> Rejection | None``.
``view`` holds what never changes within a cycle (totals, labels, software);
``room`` the free space left after this cycle's earlier placements. A
rejection is *permanent* when the worker could not take the execution even
idle; otherwise the worker is merely busy.
"""

from __future__ import annotations

from collections.abc import Callable

from flux.domain.quantity import format_bytes
from flux.matching.packages import first_unmet
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


def labels(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    for key, wanted in shape.affinity:
        offered = view.labels.get(key)
        if offered != wanted:
            if offered is None:
                detail, plural = f"lacks label {key}={wanted}", f"lack label {key}={wanted}"
            else:
                detail = f"has label {key}={offered}, not {key}={wanted}"
                plural = f"have label {key}={offered}, not {key}={wanted}"
            return Rejection(Reason.LABEL, True, f"{key}={wanted}", f"{key}={offered or ''}", detail, plural)
    return None


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


def cpu(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    wanted = shape.requests.cpu
    if not wanted or room.cpu >= wanted:
        return None
    total = view.resources.cpu_total
    if total < wanted:
        return _has(
            Reason.CPU, True, _plural(wanted, "core"), f"{total} total", f"only {_plural(total, 'core')}"
        )
    text = f"{room.cpu} of {_plural(total, 'core')} free"
    return _has(Reason.CPU, False, _plural(wanted, "core"), f"{room.cpu} free", text)


def _bytes_rejection(reason: Reason, noun: str, wanted: int, free: int, total: int) -> Rejection:
    if total < wanted:
        shown = _bytes(total, wanted)
        return _has(reason, True, _bytes(wanted, total), f"{shown} total", f"only {shown} {noun}")
    shown = _bytes(free, wanted)
    return _has(
        reason, False, _bytes(wanted, free), f"{shown} free", f"{shown} of {format_bytes(total)} {noun} free"
    )


def memory(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    wanted = shape.requests.memory
    if not wanted or room.memory >= wanted:
        return None
    return _bytes_rejection(Reason.MEMORY, "memory", wanted, room.memory, view.resources.memory_total)


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


def disk(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    wanted = shape.requests.disk
    if not wanted or room.disk >= wanted:
        return None
    return _bytes_rejection(Reason.DISK, "disk", wanted, room.disk, view.resources.disk_total)


def packages(shape: Shape, view: WorkerView, room: Room) -> Rejection | None:
    if not shape.requirements:
        return None
    unmet = first_unmet(shape.requirements, view.software)
    if unmet is None:
        return None
    requirement, installed = unmet
    wanted = str(requirement)
    if installed is None:
        return Rejection(Reason.PACKAGE, True, wanted, "not installed", f"lacks {wanted}", f"lack {wanted}")
    offered = f"{requirement.name} {installed}"
    text = f"{offered}, not {wanted}"
    return Rejection(Reason.PACKAGE, True, wanted, offered, f"has {text}", f"have {text}")


# DESIGN §3 order: labels first, then quantities, packages last (the costliest).
# Capacity sits with the quantities: it is one more thing a busy worker lacks.
# The runtime goes before everything: no amount of room makes up for it.
FILTERS: tuple[Filter, ...] = (runtime, paused, labels, capacity, cpu, memory, gpu, disk, packages)


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
        and room.cpu >= r.cpu
        and room.memory >= r.memory
        and room.disk >= r.disk
        and len(room.gpus) >= r.gpu
    )


class _IdleRoom(Room):
    """The worker as if nothing ran on it and every GPU were free: all of its totals."""

    def __init__(self, view: WorkerView):
        res = view.resources
        self.view = view
        self.cpu = res.cpu_total
        self.memory = res.memory_total
        self.disk = res.disk_total
        self.gpus = [g.index for g in res.gpus]
        self.active = 0
        self.capacity = view.capacity
        self.cpu_total = res.cpu_total
        self.paused = False  # judged as if idle and running: a pause is never permanent
        self.key = self._load_key()
