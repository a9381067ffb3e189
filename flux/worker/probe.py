"""What this machine offers: cores, memory, disk, GPUs and installed software.

``ResourceProbe.sample()`` reports allocatable totals (the smaller of the host
and its container's cgroup limits and CPU affinity, then ``--cpus``,
``--memory``, ``--gpus``, ``--disk`` caps) with which limit applied, and
observed free amounts (CPU averaged over a window, the worker's own work not
counted as load: ``flux.worker.cpu_usage``);
``changed_materially`` tells the worker runtime whether a new sample is worth
re-reporting. Everything that touches the machine (psutil, GPU readers,
installed distributions) is injectable, so the arithmetic is unit-tested.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import psutil
from packaging.markers import default_environment
from packaging.utils import canonicalize_name

from flux.domain.worker import Gpu, ResourceLimit, WorkerResources, WorkerSoftware
from flux.worker.cgroup import CgroupLimits, CgroupReader, Limit, affinity_count
from flux.worker.cpu_usage import CpuObserver, PsutilCounters, WindowedCpu
from flux.worker.gpu import GpuReader, GputilReader, GpuUnavailable, NvmlReader

logger = logging.getLogger(__name__)

MIB = 1024 * 1024

GPU_REFRESH_SECONDS = 1.0
NO_GPU_RETRY_SECONDS = 60.0


class PsutilLike(Protocol):
    """The slice of psutil the probe uses; tests pass a fake."""

    def cpu_count(self, logical: bool = True) -> int | None: ...
    def virtual_memory(self) -> Any: ...
    def disk_usage(self, path: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class Caps:
    """What the worker advertises instead of what it measures, as ``ray start --num-cpus`` does.

    ``None`` leaves a resource as measured. A cap sets the allocatable total,
    so several workers can share a machine and tests can build exact fleets;
    ``gpus`` can only select among the devices present. Memory and disk are bytes; the CLI
    parses ``"8Gi"`` with ``flux.domain.quantity.parse_bytes`` before building this.
    """

    cpus: int | None = None
    memory: int | None = None
    gpus: int | None = None
    disk: int | None = None

    def __post_init__(self) -> None:
        for field, flag in (
            ("cpus", "--cpus"),
            ("memory", "--memory"),
            ("gpus", "--gpus"),
            ("disk", "--disk"),
        ):
            value = getattr(self, field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{flag} must be a non-negative int; got {type(value).__name__} {value!r}")
            if value < 0:
                raise ValueError(f"{flag} must be a non-negative int; got {value}")


def _allocatable(physical_total: int, observed_free: int, cap: int | None) -> tuple[int, int]:
    """(total, free) under a cap, which sets the advertised total as Ray's ``--num-cpus`` does.

    Below the machine's size the free amount is what is observed, up to the cap.
    Above it (a test fleet, an oversubscribed box) the bytes in use stay the
    same and the rest of the advertised total counts as free.
    """
    if cap is None:
        return physical_total, observed_free
    return cap, max(0, min(cap, observed_free + max(0, cap - physical_total)))


def _smallest(host: int, *limits: Limit | None) -> Limit | None:
    """The tightest limit below the host's own size, or None when the host's size applies."""
    below = [limit for limit in limits if limit is not None and limit.amount < host]
    return min(below, key=lambda limit: limit.amount, default=None)


class ResourceProbe:
    """Samples this machine's resources; everything that touches the machine is a seam.

    ``cpu_observer`` says how busy the machine is with load that is not the
    worker's own (``WindowedCpu`` over psutil's counters by default);
    ``cgroups`` reads the container's limits below a root path (``/``), and
    ``affinity`` counts the CPUs this process may run on.
    """

    def __init__(
        self,
        caps: Caps | None = None,
        disk_path: str | os.PathLike[str] = "/",
        gpu_readers: Sequence[GpuReader] | None = None,
        *,
        psutil_module: PsutilLike = psutil,
        cpu_observer: CpuObserver | None = None,
        cgroups: CgroupReader | None = None,
        affinity: Callable[[], int | None] = affinity_count,
    ) -> None:
        self.caps = caps if caps is not None else Caps()
        self.disk_path = os.fspath(disk_path)
        self._psutil = psutil_module
        self._cpu = cpu_observer if cpu_observer is not None else WindowedCpu(PsutilCounters(psutil_module))
        self._cgroups = cgroups if cgroups is not None else CgroupReader()
        self._affinity = affinity
        self._gpu_readers: tuple[GpuReader, ...] = (
            (NvmlReader(), GputilReader()) if gpu_readers is None else tuple(gpu_readers)
        )
        self._logged_no_gpus = False
        self._logged_fallback = False
        self._software: WorkerSoftware | None = None
        self._gpu_cache: list[Gpu] = []
        self._gpu_expires = float("-inf")
        try:
            # A mistyped --disk-path should stop the worker at start, not at its first report.
            self._psutil.disk_usage(self.disk_path)
        except OSError as exc:
            raise ValueError(f"--disk-path {self.disk_path!r} cannot be measured: {exc}") from exc

    def sample(self) -> WorkerResources:
        caps = self.caps
        container = self._cgroups.read()
        limits: list[ResourceLimit] = []
        host_cores = self._psutil.cpu_count(logical=True) or 1
        cpu_limit = self._cpu_limit(host_cores, container)
        count = host_cores if cpu_limit is None else cpu_limit.amount
        usage = self._cpu.busy_fraction()
        if caps.cpus is None:
            cpu_total = count
            if cpu_limit is not None:
                limits.append(ResourceLimit("cpu", cpu_limit.source, count, host_cores))
        else:
            cpu_total = caps.cpus
            if caps.cpus < count:
                limits.append(ResourceLimit("cpu", "--cpus", caps.cpus, host_cores))
        memory = self._psutil.virtual_memory()
        host_memory, observed_memory = int(memory.total), int(memory.available)
        memory_limit = _smallest(host_memory, container.memory)
        memory_size = host_memory
        if memory_limit is not None:
            # Free in a container is what both the host and the cgroup still allow.
            memory_size = memory_limit.amount
            observed_memory = min(observed_memory, container.memory_free or 0)
        memory_total, memory_available = _allocatable(memory_size, observed_memory, caps.memory)
        if caps.memory is not None and caps.memory < memory_size:
            limits.append(ResourceLimit("memory", "--memory", caps.memory, host_memory))
        elif caps.memory is None and memory_limit is not None:
            limits.append(ResourceLimit("memory", memory_limit.source, memory_size, host_memory))
        disk = self._psutil.disk_usage(self.disk_path)
        disk_total, disk_free = _allocatable(int(disk.total), int(disk.free), caps.disk)
        gpus = sorted(self._gpus(), key=lambda gpu: gpu.index)
        if caps.gpus is not None:
            gpus = gpus[: caps.gpus]
        return WorkerResources(
            cpu_total=cpu_total,
            # Usage is a fraction of the whole machine; applied to the advertised
            # cores, so an idle worker offers all of them (DESIGN §3).
            cpu_available=max(0, cpu_total - round(cpu_total * usage)),
            memory_total=memory_total,
            memory_available=memory_available,
            disk_total=disk_total,
            disk_free=disk_free,
            gpus=tuple(gpus),
            limits=tuple(limits),
        ).validate()

    def software(self) -> WorkerSoftware:
        """Installed distributions and marker environment, read once: they change only on install."""
        if self._software is None:
            self._software = read_software()
        return self._software

    def _cpu_limit(self, host_cores: int, container: CgroupLimits) -> Limit | None:
        affinity = self._affinity()
        mask = None if affinity is None else Limit(affinity, "sched_getaffinity")
        return _smallest(host_cores, container.cpu_quota, container.cpuset, mask)

    def _gpus(self) -> list[Gpu]:
        """GPUs, re-read at most every ``GPU_REFRESH_SECONDS`` (``NO_GPU_RETRY_SECONDS`` when none).

        The worker samples after every execution; GPUtil spawns nvidia-smi on each
        read and a missing driver fails slowly, so reading every time would cost
        more than the executions themselves.
        """
        now = time.monotonic()
        if now >= self._gpu_expires:
            self._gpu_cache = self._read_gpus()
            self._gpu_expires = now + (GPU_REFRESH_SECONDS if self._gpu_cache else NO_GPU_RETRY_SECONDS)
        return self._gpu_cache

    def _read_gpus(self) -> list[Gpu]:
        reasons: list[str] = []
        for reader in self._gpu_readers:
            name = type(reader).__name__
            try:
                gpus = reader.read()
            except GpuUnavailable as exc:
                reasons.append(str(exc))
                continue
            except Exception as exc:
                # A GPU library misbehaving must not take the worker's CPU work down with it.
                reasons.append(f"{name} failed: {exc!r}")
                continue
            if not gpus:
                reasons.append(f"{name} found no GPUs")
                continue
            if reasons and not self._logged_fallback:
                self._logged_fallback = True
                logger.info("GPUs read with %s; earlier readers failed: %s", name, "; ".join(reasons))
            return list(gpus)
        # Logged once per probe: the reason does not change between samples, and a
        # CPU-only worker repeating it every few seconds would bury everything else.
        if not self._logged_no_gpus:
            self._logged_no_gpus = True
            logger.info("advertising no GPUs: %s", "; ".join(reasons) or "no GPU readers configured")
        return []


def read_software(
    distributions: Iterable[importlib.metadata.Distribution] | None = None,
    marker_environment: Mapping[str, str] | None = None,
) -> WorkerSoftware:
    """Installed distributions (PEP 503 names), the PEP 508 marker environment, and this runtime.

    The worker executes workflows in its own interpreter, so that is the one
    runtime it advertises: ``python`` and its version.
    """
    if distributions is None:
        distributions = importlib.metadata.distributions()
    packages: dict[str, str] = {}
    for dist in distributions:
        name, version = _name_and_version(dist)
        # Broken or half-uninstalled dists leave metadata without a name or version.
        if not name or not version:
            continue
        # First on sys.path wins, as it does for import.
        packages.setdefault(canonicalize_name(name), version)
    if marker_environment is None:
        marker_environment = default_environment()
    return WorkerSoftware(packages, dict(marker_environment), (f"python {platform.python_version()}",))


def _name_and_version(dist: importlib.metadata.Distribution) -> tuple[str | None, str | None]:
    """A distribution's name and version, from its metadata's headers alone.

    ``dist.metadata`` parses the whole file as an email message, long description included,
    and ``dist.version`` parses it again: with this project's dependencies that was 80 ms of
    a worker's start, most of it. The headers end at the first blank line.
    """
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    name = version = None
    for line in (text or "").splitlines():
        if not line:
            break
        key, _, value = line.partition(":")
        if key == "Name" and name is None:
            name = value.strip()
        elif key == "Version" and version is None:
            version = value.strip()
    return name, version


def _moved(old: int, new: int, total: int) -> bool:
    """Whether free memory or disk moved by at least max(5 % of total, 256 MiB).

    5 % is the granularity a matcher can live with: the dispatcher's own
    reservations already cover what it places, so drift here is other
    tenants', and a near-miss within 5 % costs one dispatch at most. The
    256 MiB floor stops page-cache jitter on small machines from flooding the
    control plane with reports (each one re-evaluates pending work). For a
    total under 1 GiB (a tight ``--memory`` cap) a quarter of the total is
    enough, or the floor would exceed what can move and freeze reporting.
    """
    delta = abs(new - old)
    if delta == 0:
        return False
    return (delta * 20 >= total and delta >= 256 * MIB) or delta * 4 >= total


def changed_materially(old: WorkerResources, new: WorkerResources) -> bool:
    """Whether ``new`` differs from the last reported ``old`` enough to re-report.

    Totals and whole cores always matter (they change which requests fit).
    GPUs matter when the set changes or one gains or loses all free VRAM (the
    matcher counts GPUs with free VRAM > 0), or when free VRAM moves by 5 % of
    that GPU's memory, for the same reason as memory.
    """
    if (old.cpu_total, old.memory_total, old.disk_total) != (new.cpu_total, new.memory_total, new.disk_total):
        return True
    if old.cpu_available != new.cpu_available:
        return True
    if _moved(old.memory_available, new.memory_available, new.memory_total):
        return True
    if _moved(old.disk_free, new.disk_free, new.disk_total):
        return True
    old_gpus = {gpu.index: gpu for gpu in old.gpus}
    new_gpus = {gpu.index: gpu for gpu in new.gpus}
    if {i: (g.uuid, g.name, g.memory_total) for i, g in old_gpus.items()} != {
        i: (g.uuid, g.name, g.memory_total) for i, g in new_gpus.items()
    }:
        return True
    for index, gpu in new_gpus.items():
        before = old_gpus[index].memory_free
        if (before > 0) != (gpu.memory_free > 0):
            return True
        if before != gpu.memory_free and abs(gpu.memory_free - before) * 20 >= gpu.memory_total:
            return True
    return False
