"""The fleet as the scheduler searches it: kept up to date one worker at a time.

Building every worker's view for every pass made each placement linear in the
fleet (about 7.5 µs per connected worker). ``FleetIndex`` holds the views of
the dispatchable workers and is told only what changed (``put`` one view,
``discard`` one name). For a shape it offers its candidates lazily, least
loaded first:

- workers are grouped by ``Profile`` (labels, totals, software), so the
  permanent checks (labels, packages, totals) cost one cached verdict per
  group, and groups that can never take the shape are not walked at all;
- within a group, workers with a free slot are kept sorted by their load key
  (the same key ``Room`` starts from), so the scheduler pulls only as many as
  it needs: on a fleet with room, the first one it pulls fits;
- workers at capacity are kept aside: nothing fits them until one finishes.

Binpack (``flux.matching.placement``) walks the other way: fullest first. Once a
pass first asks for it, each group also keeps its workers sorted by pack key, and
a walk for a shape that needs ``g`` GPUs and ``c`` cores starts at the first worker
with ``g`` GPUs and ``c`` cores free (a bisect). Until then ``put`` and ``discard``
cost what they did.

The scheduler's answer is the same as over the full list of views (property
tests in tests/unit/test_fleet_index.py and tests/unit/test_placement.py hold it to that).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator

from flux.matching.placement import PackKey
from flux.matching.shape import Shape
from flux.matching.view import Profile, WorkerView, load_key, view_pack_key

LoadKey = tuple[float, float, str]


class _Group:
    """The workers of one profile with a free slot, by load key."""

    __slots__ = ("keys", "packed", "profile", "views")

    def __init__(self, profile: Profile) -> None:
        # The profile it is filed under: equal to its views', and often the same object.
        self.profile = profile
        self.keys: list[LoadKey] = []
        # By pack key, kept only once binpack was asked for (``FleetIndex._packing``).
        self.packed: list[PackKey] = []
        self.views: dict[str, WorkerView] = {}


class FleetIndex:
    def __init__(self) -> None:
        self._views: dict[str, WorkerView] = {}
        # Where each open worker (a free slot, not paused) is filed: its group and key.
        self._filed: dict[str, tuple[Profile, LoadKey]] = {}
        self._groups: dict[Profile, _Group] = {}
        # Each open worker's pack key, kept once a binpack walk was asked for.
        self._packing = False
        self._packed: dict[str, PackKey] = {}

    def __len__(self) -> int:
        return len(self._views)

    def __contains__(self, name: object) -> bool:
        return name in self._views

    def get(self, name: str) -> WorkerView | None:
        return self._views.get(name)

    def views(self) -> Iterator[WorkerView]:
        """Every view held, open or not (a whole-fleet pass that needs them all)."""
        return iter(self._views.values())

    def put(self, view: WorkerView) -> Profile:
        """Hold ``view`` as its worker's current picture, replacing any earlier one.

        Returns the profile its group is filed under, equal to ``view.profile``: a worker whose next
        view carries that very object (``WorkerView(known_profile=...)``) is found by identity, not
        by comparing labels and package lists, each time it changes.
        """
        self.discard(view.name)
        self._views[view.name] = view
        group = self._groups.get(view.profile)
        if view.paused or view.active >= view.capacity:
            # Fits nothing now: kept for whole-fleet passes, never walked for a shape.
            return view.profile if group is None else group.profile
        key = load_key(view)
        if group is None:
            group = self._groups[view.profile] = _Group(view.profile)
        insort(group.keys, key)
        group.views[view.name] = view
        self._filed[view.name] = (group.profile, key)
        if self._packing:
            packed = self._packed[view.name] = view_pack_key(view)
            insort(group.packed, packed)
        return group.profile

    def discard(self, name: str) -> None:
        if self._views.pop(name, None) is None:
            return
        filed = self._filed.pop(name, None)
        if filed is None:
            return
        profile, key = filed
        group = self._groups[profile]
        del group.keys[bisect_left(group.keys, key)]
        if self._packing:
            packed = self._packed.pop(name)
            del group.packed[bisect_left(group.packed, packed)]
        del group.views[name]
        if not group.views:
            del self._groups[profile]

    def candidates(
        self, shape: Shape, permanent: Callable[[Shape, WorkerView], object]
    ) -> Iterator[tuple[LoadKey, WorkerView]]:
        """(load key, view) of every open worker whose profile could ever take ``shape``, least loaded first.

        ``permanent`` is the caller's (cached) permanent check: a rejection (not None)
        rules out the whole group. Lazy: the walk stops where the caller stops pulling.
        """
        lists = []
        for group in self._groups.values():
            sample = next(iter(group.views.values()))
            if permanent(shape, sample) is None:
                lists.append((group.keys, group.views))
        walks = [_walk(keys, views) for keys, views in lists]
        # Names are unique, so keys never tie and the views are never compared.
        return walks[0] if len(walks) == 1 else heapq.merge(*walks)

    def packed_candidates(
        self, shape: Shape, permanent: Callable[[Shape, WorkerView], object]
    ) -> Iterator[tuple[PackKey, WorkerView]]:
        """(pack key, view) of every open worker that could ever take ``shape``, fullest first.

        Workers with fewer free GPUs or cores than ``shape`` asks for are skipped by bisects: one
        to the first with enough GPUs, then one per count of free GPUs to the first with enough
        cores. The first call starts keeping the pack order (O(workers log workers), once).
        """
        if not self._packing:
            self._start_packing()
        gpus, cpu = shape.requests.gpu, shape.requests.cpu
        walks = []
        for group in self._groups.values():
            sample = next(iter(group.views.values()))
            if permanent(shape, sample) is None:
                walks.append(_walk_from(group.packed, gpus, cpu, group.views))
        return walks[0] if len(walks) == 1 else heapq.merge(*walks)

    def _start_packing(self) -> None:
        self._packing = True
        for group in self._groups.values():
            for name, view in group.views.items():
                self._packed[name] = view_pack_key(view)
            group.packed = sorted(self._packed[name] for name in group.views)


def _walk(keys: list[LoadKey], views: dict[str, WorkerView]) -> Iterator[tuple[LoadKey, WorkerView]]:
    for key in keys:
        yield key, views[key[2]]


def _walk_from(
    keys: list[PackKey], gpus: int, cpu: int, views: dict[str, WorkerView]
) -> Iterator[tuple[PackKey, WorkerView]]:
    """``keys`` from the first with ``gpus`` GPUs and ``cpu`` cores free, skipping the workers
    with too few cores at each count of free GPUs (keys sort by free GPUs, then free cores)."""
    position, end = bisect_left(keys, (gpus, cpu)), len(keys)
    while position < end:
        key = keys[position]
        if key[1] < cpu:  # the first of a larger count of free GPUs, with too few cores
            position = bisect_left(keys, (key[0], cpu), position)
            continue
        yield key, views[key[3]]
        position += 1
