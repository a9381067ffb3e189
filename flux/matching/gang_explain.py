"""Why a gang is pending, as a whole: its members' room counted per topology group.

``gang of 4 × gpu=8 same rack: racks r1 (2 workers can take a member), r2 (3): no rack has 4``.
A gang is *busy* when the idle fleet could hold it (some group has ``size`` workers that could
take a member once their work ends), *infeasible* when even the idle fleet could not; the
per-worker verdicts below the line are each member's, as for any execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flux.domain.quantity import format_bytes
from flux.matching.shape import Shape
from flux.matching.view import WorkerView

SHOWN_GROUPS = 6


@dataclass(frozen=True, slots=True)
class GangVerdict:
    summary: str
    infeasible: bool


def _member(shape: Shape) -> str:
    r = shape.requests
    parts = [f"cpu={r.cpu}"] if r.cpu else []
    if r.memory:
        parts.append(f"memory={format_bytes(r.memory)}")
    if r.gpu:
        parts.append(f"gpu={r.gpu}")
    if r.gpu_memory:
        parts.append(f"gpu_memory={format_bytes(r.gpu_memory)}")
    if r.disk:
        parts.append(f"disk={format_bytes(r.disk)}")
    return f" × {' '.join(parts)}" if parts else ""


def _workers(n: int) -> str:
    return "1 worker" if n == 1 else f"{n} workers"


def _lack(n: int, label: str) -> str:
    return (
        "" if not n else f"; 1 worker lacks label {label}" if n == 1 else f"; {n} workers lack label {label}"
    )


def explain_gang(
    shape: Shape, views: Sequence[WorkerView], fits: dict[str, bool], could: dict[str, bool]
) -> GangVerdict:
    """``fits[name]``: the worker can take a member now; ``could[name]``: it could when idle."""
    gang = shape.gang
    assert gang is not None
    head = f"gang of {gang.size}{_member(shape)}"
    head += f" same {gang.same}" if gang.same else ""
    head += f" spread {gang.spread}" if gang.spread else ""
    label = gang.same or gang.spread
    if label is None:
        now = sum(fits.values())
        idle = sum(could.values())
        text = f"{head}: {_workers(now)} can take a member, {gang.size} needed"
        if now >= gang.size:
            return GangVerdict(text, False)
        if idle >= gang.size:
            return GangVerdict(f"{text} (busy: {idle} could when their work ends)", False)
        return GangVerdict(f"{text}; infeasible: only {idle} could even idle", True)
    groups: dict[str, list[WorkerView]] = {}
    lacking = 0
    for view in views:
        same = view.labels.get(gang.same) if gang.same else ""
        if same is None or (gang.spread and gang.spread not in view.labels):
            lacking += 1
            continue
        groups.setdefault(same, []).append(view)

    def count(members: list[WorkerView], ok: dict[str, bool]) -> int:
        if gang.spread:
            return len({v.labels[gang.spread] for v in members if ok[v.name]})
        return sum(1 for v in members if ok[v.name])

    plural = f"{gang.same}s" if gang.same else f"{gang.spread}s"
    now = {value: count(members, fits) for value, members in groups.items()}
    idle = {value: count(members, could) for value, members in groups.items()}
    ranked = sorted(now, key=lambda value: (-now[value], value))
    unit = (gang.spread, f"{gang.spread}s") if gang.spread and gang.same else ("worker", "workers")

    def first(n: int) -> str:
        return f"{n} {unit[0]} can take a member" if n == 1 else f"{n} {unit[1]} can take a member"

    listed = ", ".join(
        f"{value} ({first(now[value])})" if i == 0 else f"{value} ({now[value]})"
        for i, value in enumerate(ranked[:SHOWN_GROUPS])
    )
    if len(ranked) > SHOWN_GROUPS:
        listed += f" and {len(ranked) - SHOWN_GROUPS} more"
    lack = _lack(lacking, label)
    if not gang.same:
        # spread only: one group, counted in distinct values
        (value,) = groups or {"": []}
        have, could_have = now.get(value, 0), idle.get(value, 0)
        text = f"{head}: {have} {plural} have a worker that can take a member, {gang.size} needed{lack}"
        if have >= gang.size:
            return GangVerdict(text, False)
        if could_have >= gang.size:
            return GangVerdict(f"{text} (busy: {could_have} could when their work ends)", False)
        return GangVerdict(f"{text}; infeasible: only {could_have} even idle", True)
    text = f"{head}: {plural} {listed}" if listed else f"{head}: no worker has label {gang.same}"
    if any(n >= gang.size for n in now.values()):
        return GangVerdict(text + lack, False)
    text += f": no {gang.same} has {gang.size}"
    ready = sorted((value for value in idle if idle[value] >= gang.size), key=lambda v: (-idle[v], v))
    if ready:
        busy = f" (busy: {gang.same} {ready[0]} has {idle[ready[0]]} when their work ends)"
        return GangVerdict(text + busy + lack, False)
    return GangVerdict(f"{text} even idle: infeasible{lack}", True)
