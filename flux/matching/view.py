"""The matcher's picture of a worker: what it offers and what is already promised.

``WorkerView`` is an immutable snapshot the dispatcher builds from its
registry. ``Room`` is the mutable free space derived from it inside one
scheduling cycle, so placements made in that cycle are subtracted before the
next decision (no double booking).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from types import MappingProxyType

from flux import defaults
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.matching.placement import pack_key, pick_gpus

DEFAULT_CAPACITY = defaults.CAPACITY


@dataclass(frozen=True, slots=True)
class Amounts:
    """CPU cores, memory bytes and disk bytes, e.g. what executions have reserved."""

    cpu: int = 0
    memory: int = 0
    disk: int = 0

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(self.cpu + other.cpu, self.memory + other.memory, self.disk + other.disk)

    def __sub__(self, other: Amounts) -> Amounts:
        return Amounts(self.cpu - other.cpu, self.memory - other.memory, self.disk - other.disk)


class Profile:
    """Everything about a worker that decides *permanent* fit: labels, capacity, totals, software.

    Workers with equal profiles share one cached verdict per shape, so a fleet
    of identical machines costs one static check per shape, not one per worker.
    """

    __slots__ = (
        "labels",
        "capacity",
        "cpu_total",
        "memory_total",
        "disk_total",
        "gpu_count",
        "gpu_memory_totals",
        "software",
        "_hash",
    )

    def __init__(
        self,
        labels: Mapping[str, str],
        capacity: int,
        resources: WorkerResources,
        software: WorkerSoftware,
    ):
        self.labels = labels
        self.capacity = capacity
        self.cpu_total = resources.cpu_total
        self.memory_total = resources.memory_total
        self.disk_total = resources.disk_total
        self.gpu_count = len(resources.gpus)
        # Largest first: whether ``gpu_memory`` can ever fit depends on the devices' sizes.
        self.gpu_memory_totals = tuple(sorted((g.memory_total for g in resources.gpus), reverse=True))
        self.software = software
        self._hash = hash(
            (
                frozenset(labels.items()),
                capacity,
                self.cpu_total,
                self.memory_total,
                self.disk_total,
                self.gpu_memory_totals,
                software,
            )
        )

    def __hash__(self) -> int:
        return self._hash

    def totals_of(self, resources: WorkerResources) -> bool:
        """Whether ``resources`` has this profile's totals (a report that changed only what is free)."""
        return (
            resources.cpu_total == self.cpu_total
            and resources.memory_total == self.memory_total
            and resources.disk_total == self.disk_total
            and tuple(sorted((g.memory_total for g in resources.gpus), reverse=True))
            == self.gpu_memory_totals
        )

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Profile):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.capacity == other.capacity
            and self.cpu_total == other.cpu_total
            and self.memory_total == other.memory_total
            and self.disk_total == other.disk_total
            and self.gpu_memory_totals == other.gpu_memory_totals
            and self.labels == other.labels
            and self.software == other.software
        )


@dataclass(frozen=True)
class WorkerView:
    """One worker as the dispatcher sees it at one instant.

    ``resources`` is the latest report (totals are allocatable, after caps;
    *available*/*free* are observed). ``reserved`` is what its scheduled and
    running executions hold; ``unreported`` the part of that reserved after
    the report was taken, which the observed values cannot reflect yet.
    """

    name: str
    resources: WorkerResources
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    software: WorkerSoftware = field(default_factory=WorkerSoftware)
    capacity: int = DEFAULT_CAPACITY
    active: int = 0
    reserved: Amounts = Amounts()
    unreported: Amounts = Amounts()
    held_gpus: frozenset[int] = frozenset()
    # Paused by an operator: it keeps what it runs and takes nothing new (not part of the
    # profile: pausing is never permanent).
    paused: bool = False
    # Executions queued in its own queue (--prefetch): while any are, nothing is placed in its
    # room directly (the queue is refilled instead). Not part of the profile: it never is permanent.
    queued: int = 0
    profile: Profile = field(init=False, repr=False, compare=False)
    # The profile the caller knows these fields make (a worker's entry keeps the one its last view
    # was filed under): building and comparing profiles was a tenth of a replica's placing.
    known_profile: InitVar[Profile | None] = None

    def __post_init__(self, known_profile: Profile | None) -> None:
        object.__setattr__(
            self,
            "profile",
            known_profile or Profile(self.labels, self.capacity, self.resources, self.software),
        )

    @property
    def free_cpu(self) -> int:
        r = self.resources
        return max(0, min(r.cpu_available - self.unreported.cpu, r.cpu_total - self.reserved.cpu))

    @property
    def free_memory(self) -> int:
        r = self.resources
        return max(
            0,
            min(r.memory_available - self.unreported.memory, r.memory_total - self.reserved.memory),
        )

    @property
    def free_disk(self) -> int:
        r = self.resources
        return max(0, min(r.disk_free - self.unreported.disk, r.disk_total - self.reserved.disk))

    @property
    def free_gpus(self) -> tuple[int, ...]:
        """Indices with free VRAM that no execution holds, most free VRAM first."""
        return tuple(index for index, _ in self.free_vram)

    @property
    def free_vram(self) -> tuple[tuple[int, int], ...]:
        """(index, free VRAM bytes) of the GPUs no execution holds and with VRAM free, most free first.

        A GPU is held whole by the execution it was assigned to (``held_gpus``), so
        what that execution reserves on the device is all of it: a held GPU offers
        no VRAM to anyone else, whatever its last report says. The free figure of
        the others is the observed one.
        """
        usable = [g for g in self.resources.gpus if g.memory_free > 0 and g.index not in self.held_gpus]
        usable.sort(key=lambda g: (-g.memory_free, g.index))
        return tuple((g.index, g.memory_free) for g in usable)


def load_key(view: WorkerView) -> tuple[float, float, str]:
    """The load key a fresh ``Room`` of ``view`` starts with (``Room._load_key``), without building one."""
    load = view.active / view.capacity if view.capacity > 0 else float("inf")
    cpu_total = view.resources.cpu_total
    cpu_fraction = view.free_cpu / cpu_total if cpu_total > 0 else 0.0
    return (load, -cpu_fraction, view.name)


def view_pack_key(view: WorkerView) -> tuple[int, int, float, str]:
    """The pack key a fresh ``Room`` of ``view`` starts with (``Room.pack_key``), without building one."""
    return pack_key(len(view.free_gpus), view.free_cpu, view.active, view.capacity, view.name)


class Room:
    """Mutable free space of one worker during one scheduling cycle."""

    __slots__ = (
        "view",
        "cpu",
        "memory",
        "disk",
        "gpus",
        "vram",
        "active",
        "capacity",
        "cpu_total",
        "paused",
        "queued",
        "key",
        "slack",
        "pack",
    )

    def __init__(self, view: WorkerView):
        self.view = view
        # Set on a worker nominated for a starving execution (``flux.matching.aging``): the
        # room left beside that execution, which anything else placed here must also fit.
        self.slack: Room | None = None
        self.paused = view.paused
        self.queued = view.queued
        self.cpu = view.free_cpu
        self.memory = view.free_memory
        self.disk = view.free_disk
        free_vram = view.free_vram
        # Unassigned GPU indices, most free VRAM first, and each one's free VRAM.
        self.gpus = [index for index, _ in free_vram]
        self.vram = dict(free_vram)
        self.active = view.active
        self.capacity = view.capacity
        self.cpu_total = view.resources.cpu_total
        self.key = self._load_key()
        self.pack: tuple[int, int, float, str] | None = None

    def _load_key(self) -> tuple[float, float, str]:
        """Least loaded first: fewest active per capacity, then most free CPU fraction, then name.

        Stored as ``key`` and renewed by ``take``, so heap entries are checked for staleness by identity.
        """
        load = self.active / self.capacity if self.capacity > 0 else float("inf")
        cpu_fraction = self.cpu / self.cpu_total if self.cpu_total > 0 else 0.0
        return (load, -cpu_fraction, self.view.name)

    def pack_key(self) -> tuple[int, int, float, str]:
        """Binpack's order (``flux.matching.placement.pack_key``), made when first asked after a take.

        The same object until the next ``take``, so heap entries are checked for staleness by identity.
        """
        key = self.pack
        if key is None:
            key = self.pack = pack_key(len(self.gpus), self.cpu, self.active, self.capacity, self.view.name)
        return key

    def gpus_with(self, vram: int) -> list[int]:
        """Unassigned GPUs with at least ``vram`` bytes free, most free first (all of them for 0)."""
        if not vram:
            return self.gpus
        # ``gpus`` is sorted by free VRAM, most first: the ones with enough are a prefix.
        count = 0
        for index in self.gpus:
            if self.vram[index] < vram:
                break
            count += 1
        return self.gpus[:count]

    def take(
        self, cpu: int, memory: int, disk: int, gpus: int, gpu_memory: int = 0, pack: bool = False
    ) -> tuple[int, ...]:
        """Reserve the amounts and return the GPU indices assigned.

        Without ``gpu_memory`` the GPUs with the most free VRAM go first, as they
        always have. With it, the best fit: the devices with the least free VRAM
        that still have ``gpu_memory``, so a later request for a larger amount
        still finds the roomy ones. ``pack`` (binpack): among those that qualify,
        the set that keeps the largest aligned blocks whole (``pick_gpus``).
        """
        self.pack = None
        if self.slack is not None:
            self.slack.take(cpu, memory, disk, gpus, gpu_memory)
        self.cpu -= cpu
        self.memory -= memory
        self.disk -= disk
        self.active += 1
        if pack and gpus:
            assigned = pick_gpus(self.gpus_with(gpu_memory), gpus)
            self.gpus = [index for index in self.gpus if index not in assigned]
        elif gpu_memory:
            eligible = self.gpus_with(gpu_memory)
            assigned = tuple(eligible[len(eligible) - gpus :]) if gpus else ()
            self.gpus = [index for index in self.gpus if index not in assigned]
        else:
            assigned = tuple(self.gpus[:gpus])
            del self.gpus[:gpus]
        self.key = self._load_key()
        return assigned
