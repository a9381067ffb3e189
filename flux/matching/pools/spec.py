"""A pool's shape (``PoolSpec``): what one worker of it offers, declared or learned.

A pool is a named set of workers of one kind. Its shape is what one worker of
it offers: labels, resources, runtime, packages and capacity, declared by an
operator (``flux pool apply``, read by ``flux.matching.pools.declarations``) or
learned from a connected worker of the pool (``learned``). A worker joins a
pool through the reserved label ``flux/pool`` (``POOL_LABEL``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from packaging.markers import default_environment

from flux import defaults
from flux.domain.labels import validate_labels
from flux.domain.quantity import format_bytes
from flux.domain.worker import DEFAULT_RUNTIME, Gpu, WorkerResources, WorkerSoftware
from flux.matching.shape import Shape
from flux.matching.view import WorkerView

POOL_LABEL = "flux/pool"
_MARKERS = default_environment()
DECLARED, LEARNED = "declared", "learned"
NAME_FORM = "1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"


def validate_pool_name(name: object, field: str = "pool") -> str:
    """A pool name is a label value (it is carried as the ``flux/pool`` label), and not empty."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{field} must be {NAME_FORM}, e.g. 'a100'; got {name!r}")
    try:
        validate_labels({POOL_LABEL: name}, field)
    except ValueError:
        raise ValueError(f"{field} must be {NAME_FORM}, e.g. 'a100'; got {name!r}") from None
    return name


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """What one worker of a pool offers, and how many workers the pool may have."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cpu: int = 0
    memory: int = 0
    gpu: int = 0
    # VRAM of each GPU, bytes.
    gpu_memory: int = 0
    disk: int = 0
    runtime: str = DEFAULT_RUNTIME
    # Installed distributions, name -> version.
    packages: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    capacity: int = defaults.CAPACITY
    min_workers: int = 0
    # 0: no upper bound.
    max_workers: int = 0
    source: str = DECLARED

    def view(self) -> WorkerView:
        """An idle worker of this pool, as the matcher would see it once connected."""
        gpus = tuple(
            Gpu(i, memory_total=self.gpu_memory, memory_free=self.gpu_memory) for i in range(self.gpu)
        )
        resources = WorkerResources(
            cpu_total=self.cpu,
            cpu_available=self.cpu,
            memory_total=self.memory,
            memory_available=self.memory,
            disk_total=self.disk,
            disk_free=self.disk,
            gpus=gpus,
        )
        labels = MappingProxyType({**self.labels, POOL_LABEL: self.name})
        # Markers are judged against this server's own environment: a declaration names no platform.
        software = WorkerSoftware(self.packages, _MARKERS, runtimes=(self.runtime,))
        return WorkerView(f"pool:{self.name}", resources, labels, software, self.capacity)

    def per_worker(self, shape: Shape) -> int:
        """Executions of ``shape`` one idle worker of this pool runs at once (>= 1 when it fits)."""
        r = shape.requests
        fits = [self.capacity]
        for wanted, offered in ((r.cpu, self.cpu), (r.memory, self.memory), (r.disk, self.disk)):
            if wanted:
                fits.append(offered // wanted)
        if r.gpu:
            fits.append(self.gpu // r.gpu)
        return max(1, min(fits))

    def to_document(self) -> dict[str, object]:
        """The declaration form ``parse_pool`` reads back (quantities as exact byte counts)."""
        resources: dict[str, int] = {
            k: v
            for k, v in (
                ("cpu", self.cpu),
                ("memory", self.memory),
                ("gpu", self.gpu),
                ("gpu_memory", self.gpu_memory),
                ("disk", self.disk),
            )
            if v
        }
        return {
            "name": self.name,
            "labels": dict(self.labels),
            "resources": resources,
            "runtime": self.runtime,
            "packages": dict(self.packages),
            "capacity": self.capacity,
            "min": self.min_workers,
            "max": self.max_workers,
        }

    def describe(self) -> str:
        """``8 cores, 64.0 GiB, 1 GPU (80.0 GiB), 100.0 GiB disk``."""
        parts = [f"{self.cpu} cores", format_bytes(self.memory)]
        if self.gpu:
            vram = f" ({format_bytes(self.gpu_memory)})" if self.gpu_memory else ""
            parts.append(f"{self.gpu} GPU{'s' if self.gpu != 1 else ''}{vram}")
        if self.disk:
            parts.append(f"{format_bytes(self.disk)} disk")
        return ", ".join(parts)


def learned(name: str, view: WorkerView) -> PoolSpec:
    """A pool's shape as one of its connected workers shows it (its totals, labels and software)."""
    r = view.resources
    vram = min((g.memory_total for g in r.gpus), default=0)
    labels = {k: v for k, v in view.labels.items() if k != POOL_LABEL}
    runtime = view.software.runtimes[0] if view.software.runtimes else DEFAULT_RUNTIME
    return PoolSpec(
        name=name,
        labels=MappingProxyType(labels),
        cpu=r.cpu_total,
        memory=r.memory_total,
        gpu=len(r.gpus),
        gpu_memory=vram,
        disk=r.disk_total,
        runtime=runtime,
        packages=view.software.packages,
        capacity=view.capacity,
        source=LEARNED,
    )
