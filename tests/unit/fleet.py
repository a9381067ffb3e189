"""Builders for matcher tests: worker views, shapes and pending queues in one line each.

Quantities take the same forms a user writes (``"16Gi"``, ``"100G"``, int
bytes), so a table row reads like the fleet it describes. Unless a test says
otherwise a worker is idle: observed free equals its allocatable total.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from flux.domain.quantity import parse_bytes
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import Gpu, WorkerResources, WorkerSoftware
from flux.matching import Amounts, PendingQueue, Shape, WorkerView

GiB = 1024**3

# A fixed Linux CPython environment, so marker tests never depend on the machine running them.
LINUX = {
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_release": "6.8.0",
    "platform_system": "Linux",
    "platform_version": "#1 SMP",
    "python_full_version": "3.12.3",
    "python_version": "3.12",
    "sys_platform": "linux",
}
WINDOWS = {
    **LINUX,
    "os_name": "nt",
    "platform_system": "Windows",
    "sys_platform": "win32",
}

Quantity = int | str


def size(value: Quantity | None) -> int:
    return 0 if value is None else parse_bytes(value, "test quantity")


def amounts(cpu: int = 0, memory: Quantity = 0, disk: Quantity = 0) -> Amounts:
    return Amounts(cpu, size(memory), size(disk))


def _amounts(value: Amounts | Mapping[str, Quantity] | None) -> Amounts:
    if value is None:
        return Amounts()
    if isinstance(value, Amounts):
        return value
    return amounts(**value)


def gpus_of(spec: int | Sequence[Quantity], total: Quantity = "80Gi") -> tuple[Gpu, ...]:
    """``3`` -> three idle GPUs; ``["10Gi", 0]`` -> one GPU per entry with that much free VRAM."""
    free = [total] * spec if isinstance(spec, int) else list(spec)
    return tuple(
        Gpu(index=i, uuid=f"GPU-{i}", name="H100", memory_total=size(total), memory_free=size(f))
        for i, f in enumerate(free)
    )


def worker(
    name: str = "w",
    cpu: int = 4,
    memory: Quantity = "16Gi",
    gpus: int | Sequence[Quantity] = 0,
    disk: Quantity = "100Gi",
    *,
    labels: Mapping[str, str] | None = None,
    packages: Mapping[str, str] | None = None,
    markers: Mapping[str, str] | None = LINUX,
    active: int = 0,
    capacity: int = 16,
    reserved: Amounts | Mapping[str, Quantity] | None = None,
    unreported: Amounts | Mapping[str, Quantity] | None = None,
    held_gpus: Iterable[int] = (),
    cpu_available: int | None = None,
    memory_available: Quantity | None = None,
    disk_free: Quantity | None = None,
    gpu_memory: Quantity = "80Gi",
    runtimes: Sequence[str] = (),
    paused: bool = False,
    queued: int = 0,
) -> WorkerView:
    """One worker; ``cpu``/``memory``/``disk`` are allocatable totals, ``*_available`` observed free."""
    resources = WorkerResources(
        cpu_total=cpu,
        cpu_available=cpu if cpu_available is None else cpu_available,
        memory_total=size(memory),
        memory_available=size(memory if memory_available is None else memory_available),
        disk_total=size(disk),
        disk_free=size(disk if disk_free is None else disk_free),
        gpus=gpus_of(gpus, gpu_memory),
    ).validate()
    return WorkerView(
        name=name,
        resources=resources,
        labels=dict(labels or {}),
        software=WorkerSoftware(packages or {}, markers, runtimes),
        capacity=capacity,
        active=active,
        reserved=_amounts(reserved),
        unreported=_amounts(unreported),
        held_gpus=frozenset(held_gpus),
        paused=paused,
        queued=queued,
    )


def shape(
    cpu: int | None = None,
    memory: Quantity | None = None,
    gpu: int | None = None,
    disk: Quantity | None = None,
    packages: Sequence[str] | None = None,
    affinity: Mapping[str, str] | None = None,
    runtime: str = "python",
    gpu_memory: Quantity | None = None,
) -> Shape:
    return Shape(
        ResourceRequest(cpu=cpu, memory=memory, gpu=gpu, disk=disk, packages=packages, gpu_memory=gpu_memory),
        affinity,
        runtime,
    )


def queue_of(*items: Shape | tuple[str, Shape] | tuple[str, Shape, int]) -> PendingQueue:
    """Pending executions in submission order: a bare shape gets id ``e<seq>``; seq defaults to position."""
    queue = PendingQueue()
    for seq, item in enumerate(items):
        if isinstance(item, Shape):
            queue.add(f"e{seq}", item, seq)
        elif len(item) == 2:
            queue.add(item[0], item[1], seq)
        else:
            queue.add(*item)
    return queue


def repeat(n: int, shp: Shape, prefix: str = "e") -> list[tuple[str, Shape]]:
    return [(f"{prefix}{i}", shp) for i in range(n)]
