"""Placement policies: which capable worker an execution goes to, and which of its GPUs.

- ``spread`` (the default, as before): the least loaded capable worker
  (``view.load_key``); GPUs with the most free VRAM first.
- ``binpack``: the fullest capable worker that fits, so idle workers stay idle
  and a pool can scale in. Its order is ``pack_key``: fewest free GPUs first
  (the smallest free GPU count that still fits: a 2-GPU job takes the worker
  with 2 free, not the one with 8, which stays whole for an 8-GPU job), then
  fewest free cores (best fit by cores, likewise), then most active per
  capacity, then name. On a worker its GPUs are chosen by ``pick_gpus`` to keep
  aligned blocks of devices whole.

A server has a default (``flux start server --placement``); a workflow may name
its own (``@workflow.with_options(placement="binpack")``), carried on its
``Shape``. Pure: no I/O, no protobuf.

Cost: the ``FleetIndex`` keeps a second order per profile group by ``pack_key``
once any pass asks for binpack; a shape's walk skips, by bisects (one per count of
free GPUs), every worker with fewer free GPUs or cores than it asks, so those are
never looked at. Workers passed over are those too full for the shape on another
figure (memory, disk, GPU memory, slots); each at most once per shape per pass. On
bench.matching's 10,000 workers a placement looks at about 3 (spread: about 2).
"""

from __future__ import annotations

from flux.domain.placement import BINPACK, DEFAULT_PLACEMENT, PLACEMENTS, SPREAD, validate_placement

__all__ = [
    "BINPACK",
    "DEFAULT_PLACEMENT",
    "PLACEMENTS",
    "SPREAD",
    "effective",
    "fragmentation_note",
    "pack_key",
    "pick_gpus",
    "validate_placement",
]

PackKey = tuple[int, int, float, str]


def effective(placement: str, default: str) -> str:
    """A shape's policy: its own, or the server's when it names none."""
    return placement or default


def pack_key(free_gpus: int, free_cpu: int, active: int, capacity: int, name: str) -> PackKey:
    """Binpack's order, smallest first: fewest free GPUs, fewest free cores, most loaded, then name."""
    load = active / capacity if capacity > 0 else float("inf")
    return (free_gpus, free_cpu, -load, name)


def pick_gpus(free: list[int], count: int) -> tuple[int, ...]:
    """``count`` of the ``free`` GPU indices, chosen to leave the largest aligned blocks whole.

    Buddy-style: indices are split into aligned halves (0-3 and 4-7 of 8, then 0-1, 2-3, ...);
    a request that fits in one half goes to the half with the fewest free devices that can hold
    it (best fit), so the emptier half stays whole for a larger request later; a request larger
    than either half takes all of the fuller half and the rest from the other. Devices on one
    NVLink island or PCIe switch are numbered together on common machines, so keeping aligned
    blocks free keeps such islands free. Sorted ascending.
    """
    if count <= 0:
        return ()
    if count >= len(free):
        return tuple(sorted(free))[:count]
    ordered = sorted(free)
    size = 1
    while size <= ordered[-1]:
        size *= 2
    return tuple(sorted(_pick(ordered, count, 0, size)))


def _pick(free: list[int], count: int, low: int, size: int) -> list[int]:
    """``count`` indices of ``free`` (sorted, all within [low, low + size), at least ``count`` of them)."""
    if count >= len(free):
        return free[:count]
    half = size // 2
    middle = low + half
    left = [i for i in free if i < middle]
    right = [i for i in free if i >= middle]
    fitting = [side for side in ((left, low), (right, middle)) if len(side[0]) >= count]
    if fitting:
        # Best fit: the half with the fewest free devices that can hold it (the lower one on a tie).
        side, start = min(fitting, key=lambda s: len(s[0]))
        return _pick(side, count, start, half)
    # Neither half holds it alone: empty the fuller half (fewer free), the rest from the other.
    (fuller, _), (other, other_low) = sorted(((left, low), (right, middle)), key=lambda s: len(s[0]))
    return fuller + _pick(other, count - len(fuller), other_low, half)


def fragmentation_note(gpus: int, free_per_worker: list[int], policy: str) -> str:
    """Explain's line when GPUs are free in all but on no one worker enough: where the policy matters.

    ``free_per_worker``: each capable, unpaused worker's free GPU count now. Empty when the
    request fits somewhere, or when the fleet's free GPUs together are fewer than it asks anyway.
    """
    if gpus <= 0 or not free_per_worker:
        return ""
    total, most = sum(free_per_worker), max(free_per_worker)
    if most >= gpus or total < gpus:
        return ""
    spread_over = sum(1 for n in free_per_worker if n)
    said = f"{total} GPUs are free over {spread_over} workers but at most {most} on one (placement {policy})"
    if policy == SPREAD:
        return f"{said}: binpack (--placement binpack, or placement='binpack') keeps whole workers free"
    return said
