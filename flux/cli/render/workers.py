"""The fleet: one worker as JSON, and the workers table fitted to the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flux.cli.render.common import byte_pair, duration, labels_text, table
from flux.domain.quantity import format_bytes
from flux.v1 import control_pb2


def worker_dict(w: control_pb2.WorkerInfo) -> dict[str, Any]:
    r = w.resources
    return {
        "name": w.name,
        "connected": w.connected,
        "draining": w.draining,
        "paused": w.paused,
        "runtimes": list(w.runtimes),
        "transport": w.transport,
        "address": w.address or None,
        "labels": dict(w.labels),
        "capacity": w.capacity,
        "active_executions": w.active_executions,
        "last_seen_ms": w.last_seen_ms,
        "resources": {
            "cpu_total": r.cpu_total, "cpu_available": r.cpu_available,
            "memory_total": r.memory_total, "memory_available": r.memory_available,
            "disk_total": r.disk_total, "disk_free": r.disk_free,
            "gpus": [{"index": g.index, "name": g.name, "memory_total": g.memory_total, "memory_free": g.memory_free}
                     for g in r.gpus],
            # Which limit below the host set a total (a container's cgroup, the affinity mask, a cap).
            "limits": [{"resource": x.resource, "source": x.source, "limit": x.limit, "host": x.host}
                       for x in r.limits],
        },
        "reserved": {"cpu": w.reserved.cpu, "memory": w.reserved.memory, "disk": w.reserved.disk,
                     "gpu_indices": list(w.reserved.gpu_indices)},
        # What the matcher counts as free now (observed, less reservations): explain's figure.
        "free": {"cpu": w.free.cpu, "memory": w.free.memory, "disk": w.free.disk, "gpus": w.free.gpus},
        "package_count": w.package_count,
    }  # fmt: skip


def _worker_state(w: control_pb2.WorkerInfo) -> str:
    if not w.connected:
        return "disconnected"
    return "draining" if w.draining else "paused" if w.paused else "connected"


WORKER_HEADER = (
    "NAME",
    "STATE",
    "TRANSPORT",
    "LOAD",
    "CPU",
    "MEMORY",
    "GPUS",
    "DISK",
    "SEEN",
    "LIMITS",
    "LABELS",
)
# LOAD is a number: right-aligned. CPU to DISK are phrases ("free 26/32 (reserved 6)"): left-aligned,
# so each header sits over the start of its cells.
_WORKER_NUMBERS = frozenset({3})
# Too wide for the terminal: the short form (free/total, right-aligned), then these columns go first.
_COMPACT_NUMBERS = frozenset(range(3, 8))
_WORKER_EXPENDABLE = (9, 8, 2, 7, 6)  # LIMITS, SEEN, TRANSPORT, DISK, GPUS
_WORKER_SHRINKABLE = (10, 0)  # LABELS, NAME


def _free(free: int, total: int, reserved: int) -> str:
    return f"free {free}/{total} (reserved {reserved})"


def _free_bytes(free: int, total: int, reserved: int) -> str:
    return f"free {byte_pair(free, total)} (reserved {format_bytes(reserved)})"


def _limits(limits: Any) -> str:
    """``cpu=cpu.max,memory=memory.max``: which limit below the host set each total; ``-`` for none."""
    return ",".join(f"{x.resource}={x.source.removeprefix('cgroup ')}" for x in limits) or "-"


def worker_row(w: control_pb2.WorkerInfo, now_ms: int) -> tuple[str, ...]:
    """Free over advertised per resource, and what running work has reserved.

    Free is what the matcher counts (observed free, less reservations), the
    figure ``explain`` quotes: a host loaded by other processes shows little
    free with nothing reserved, and the two columns say which is which.
    """
    r, held, free = w.resources, w.reserved, w.free
    seen = "-" if not w.last_seen_ms else f"{duration((now_ms - w.last_seen_ms) / 1000)} ago"
    return (
        w.name,
        _worker_state(w),
        w.transport or "-",
        f"{w.active_executions}/{w.capacity}",
        _free(free.cpu, r.cpu_total, held.cpu),
        _free_bytes(free.memory, r.memory_total, held.memory),
        _free(free.gpus, len(r.gpus), len(held.gpu_indices)),
        _free_bytes(free.disk, r.disk_total, held.disk),
        seen,
        _limits(r.limits),
        labels_text(w.labels),
    )


def compact_worker_row(w: control_pb2.WorkerInfo, now_ms: int) -> tuple[str, ...]:
    """``worker_row`` for a narrow terminal: free/total only (``flux workers list --json`` has the rest)."""
    r, free = w.resources, w.free
    full = worker_row(w, now_ms)
    return (
        *full[:4],
        f"{free.cpu}/{r.cpu_total}",
        byte_pair(free.memory, r.memory_total),
        f"{free.gpus}/{len(r.gpus)}",
        byte_pair(free.disk, r.disk_total),
        *full[8:],
    )


def workers_text(workers: Sequence[control_pb2.WorkerInfo], now_ms: int, width: int | None = None) -> str:
    """The fleet as a table; ``now_ms`` (Unix ms) dates SEEN, so the output depends on its inputs only.

    Within ``width`` columns where it can be: the full table when it fits, else free/total alone
    per resource, then the less needed columns left out (a note says which).
    """
    if not workers:
        return "no workers registered"
    full = table(WORKER_HEADER, [worker_row(w, now_ms) for w in workers], right=_WORKER_NUMBERS)
    if width is None or max(len(line) for line in full.splitlines()) <= width:
        return full
    return table(
        WORKER_HEADER, [compact_worker_row(w, now_ms) for w in workers], right=_COMPACT_NUMBERS,
        width=width, drop=_WORKER_EXPENDABLE, shrink=_WORKER_SHRINKABLE,
    )  # fmt: skip
