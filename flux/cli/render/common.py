"""What every renderer shares: byte and time units, labels, resource requests, the table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from flux.cli.tables import render as render_columns
from flux.domain.quantity import format_bytes

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def byte_pair(used: int, total: int) -> str:
    """``used/total`` in the unit that suits the larger: ``12.0/16.0 GiB``."""
    largest, unit = float(max(used, total)), 0
    while largest >= 1024 and unit < len(_UNITS) - 1:
        largest, unit = largest / 1024, unit + 1
    if unit == 0:
        return f"{used}/{total} B"
    scale = 1024**unit
    return f"{used / scale:.1f}/{total / scale:.1f} {_UNITS[unit]}"


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``, ``3d04h``: two units at most, for a glance."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def labels_text(labels: Any) -> str:
    """``k=v,k2=v2`` sorted by key; ``-`` for none (worker labels, affinity)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def requests_text(r: Any) -> str:
    """A ResourceRequest in the words a workflow declares it: ``cpu=4 memory=8.0 GiB gpu=1``."""
    parts = []
    if r.cpu:
        parts.append(f"cpu={r.cpu}")
    if r.memory:
        parts.append(f"memory={format_bytes(r.memory)}")
    if r.gpu:
        parts.append(f"gpu={r.gpu}")
    if r.gpu_memory:
        parts.append(f"gpu_memory={format_bytes(r.gpu_memory)}")
    if r.disk:
        parts.append(f"disk={format_bytes(r.disk)}")
    parts.extend(r.packages)
    return " ".join(parts) or "-"


def when(ms: int) -> str:
    """A Unix time in ms as UTC to the second; ``-`` for 0 (never set)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ms else "-"


def table(
    header: tuple[str, ...],
    rows: list[tuple[str, ...]],
    right: frozenset[int] = frozenset(),
    width: int | None = None,
    drop: Sequence[int] = (),
    shrink: Sequence[int] = (),
) -> str:
    """Columns two spaces apart; the ``right`` ones (numbers) right-aligned; see ``flux.cli.tables``."""
    return render_columns(header, rows, right, width, drop, shrink)
