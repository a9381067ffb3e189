"""What a worker offers: resources, GPUs and installed software.

These are the probe's output and the matcher's input. They carry no
reservations; the dispatcher's view of a worker adds those (see
``flux.matching.view``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from flux.domain.quantity import format_bytes

if TYPE_CHECKING:
    from flux.v1 import resources_pb2


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str = ""
    name: str = ""
    memory_total: int = 0
    memory_free: int = 0

    def to_proto(self) -> resources_pb2.Gpu:
        from flux.v1 import resources_pb2

        return resources_pb2.Gpu(
            index=self.index,
            uuid=self.uuid,
            name=self.name,
            memory_total=self.memory_total,
            memory_free=self.memory_free,
        )

    @classmethod
    def from_proto(cls, message: resources_pb2.Gpu) -> Gpu:
        return cls(
            index=message.index,
            uuid=message.uuid,
            name=message.name,
            memory_total=message.memory_total,
            memory_free=message.memory_free,
        )


@dataclass(frozen=True, slots=True)
class ResourceLimit:
    """A limit smaller than the host that set an advertised total, e.g. a container's cgroup.

    ``resource`` is ``"cpu"`` (cores) or ``"memory"`` (bytes); ``source`` names
    what applied (``"cgroup cpu.max"``, ``"sched_getaffinity"``, ``"--cpus"``);
    ``limit`` is the total advertised under it and ``host`` the host's own size.
    """

    resource: str
    source: str
    limit: int
    host: int

    def to_proto(self) -> resources_pb2.ResourceLimit:
        from flux.v1 import resources_pb2

        return resources_pb2.ResourceLimit(
            resource=self.resource, source=self.source, limit=self.limit, host=self.host
        )

    @classmethod
    def from_proto(cls, message: resources_pb2.ResourceLimit) -> ResourceLimit:
        return cls(message.resource, message.source, message.limit, message.host)

    def describe(self) -> str:
        """``cpu 2 of 64 (cgroup cpu.max)``, ``memory 4.0 GiB of 62.8 GiB (cgroup memory.max)``."""
        if self.resource == "memory":
            amounts = f"{format_bytes(self.limit)} of {format_bytes(self.host)}"
        else:
            amounts = f"{self.limit} of {self.host}"
        return f"{self.resource} {amounts} ({self.source})"


@dataclass(frozen=True, slots=True)
class WorkerResources:
    """Allocatable totals (after caps) and observed free amounts.

    ``limits`` says which limit smaller than the host set ``cpu_total`` or
    ``memory_total`` (a cgroup, the affinity mask, a cap); empty when the
    host's own size applied.
    """

    cpu_total: int = 0
    cpu_available: int = 0
    memory_total: int = 0
    memory_available: int = 0
    disk_total: int = 0
    disk_free: int = 0
    gpus: tuple[Gpu, ...] = ()
    limits: tuple[ResourceLimit, ...] = ()

    def limit_of(self, resource: str) -> ResourceLimit | None:
        return next((limit for limit in self.limits if limit.resource == resource), None)

    def validate(self) -> WorkerResources:
        """Refuse reports no real machine produces; the matcher trusts what passes."""
        for name in (
            "cpu_total",
            "cpu_available",
            "memory_total",
            "memory_available",
            "disk_total",
            "disk_free",
        ):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"resources.{name} must be >= 0; got {value}")
        indices = [gpu.index for gpu in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"resources.gpus has duplicate indices {sorted(indices)}")
        for gpu in self.gpus:
            if gpu.index < 0 or gpu.memory_total < 0 or gpu.memory_free < 0:
                raise ValueError(f"resources.gpus[{gpu.index}] has a negative index or memory")
        return self

    def to_proto(self) -> resources_pb2.WorkerResources:
        from flux.v1 import resources_pb2

        return resources_pb2.WorkerResources(
            cpu_total=self.cpu_total,
            cpu_available=self.cpu_available,
            memory_total=self.memory_total,
            memory_available=self.memory_available,
            disk_total=self.disk_total,
            disk_free=self.disk_free,
            gpus=[gpu.to_proto() for gpu in self.gpus],
            limits=[limit.to_proto() for limit in self.limits],
        )

    @classmethod
    def from_proto(cls, message: resources_pb2.WorkerResources) -> WorkerResources:
        return cls(
            cpu_total=message.cpu_total,
            cpu_available=message.cpu_available,
            memory_total=message.memory_total,
            memory_available=message.memory_available,
            disk_total=message.disk_total,
            disk_free=message.disk_free,
            gpus=tuple(Gpu.from_proto(gpu) for gpu in message.gpus),
            limits=tuple(ResourceLimit.from_proto(limit) for limit in message.limits),
        ).validate()


# What a worker that advertises no runtime runs: every worker from before runtimes
# were advertised is the Python worker, so it keeps getting Python workflows.
DEFAULT_RUNTIME = "python"


def runtime_name(advertised: str) -> str:
    """``"python 3.11.9"`` -> ``"python"``: workflows match a runtime by name."""
    return advertised.split(None, 1)[0].lower() if advertised.strip() else ""


class WorkerSoftware:
    """Installed distributions (PEP 503 name -> version), the PEP 508 marker environment, and runtimes.

    ``runtimes`` are as advertised ("python 3.11.9"); ``runtime_names`` their
    names, ``{"python"}`` when none was advertised.

    Immutable and hashable with the hash computed once, because the matcher
    groups workers by software to check each shape once per distinct fleet
    image rather than once per worker.
    """

    __slots__ = ("packages", "marker_environment", "runtimes", "runtime_names", "_hash")

    def __init__(
        self,
        packages: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        marker_environment: Mapping[str, str] | None = None,
        runtimes: Iterable[str] = (),
    ) -> None:
        pairs = packages.items() if isinstance(packages, Mapping) else packages
        object.__setattr__(self, "packages", MappingProxyType({canonicalize_name(n): v for n, v in pairs}))
        object.__setattr__(self, "marker_environment", MappingProxyType(dict(marker_environment or {})))
        object.__setattr__(self, "runtimes", tuple(runtimes))
        names = frozenset(filter(None, map(runtime_name, self.runtimes))) or frozenset({DEFAULT_RUNTIME})
        object.__setattr__(self, "runtime_names", names)
        object.__setattr__(
            self,
            "_hash",
            hash(
                (frozenset(self.packages.items()), frozenset(self.marker_environment.items()), self.runtimes)
            ),
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("WorkerSoftware is immutable")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, WorkerSoftware):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.packages == other.packages
            and self.marker_environment == other.marker_environment
            and self.runtimes == other.runtimes
        )

    def __repr__(self) -> str:
        return f"WorkerSoftware({len(self.packages)} packages)"

    def to_proto(self) -> resources_pb2.WorkerSoftware:
        from flux.v1 import resources_pb2

        return resources_pb2.WorkerSoftware(
            packages=[resources_pb2.Package(name=n, version=v) for n, v in sorted(self.packages.items())],
            marker_environment=dict(self.marker_environment),
            runtimes=list(self.runtimes),
        )

    @classmethod
    def from_proto(cls, message: resources_pb2.WorkerSoftware) -> WorkerSoftware:
        return cls(
            ((p.name, p.version) for p in message.packages),
            dict(message.marker_environment),
            message.runtimes,
        )
