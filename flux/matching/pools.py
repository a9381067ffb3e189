"""Worker pools and the demand on them: what an autoscaler needs to start workers from zero.

A pool is a named set of workers of one kind. Its *shape* (``PoolSpec``) is
what one worker of it offers: labels, resources, runtime, packages and
capacity, declared by an operator (``flux pool apply``) or learned from a
connected worker of the pool. A worker joins a pool through the reserved
label ``flux/pool`` (``flux start worker --pool``), so affinity can name a
pool too.

Demand is computed per requirement shape, never per pending row:

1. Each pending shape goes to at most one pool: among the pools whose idle
   worker could ever run it (the matcher's own permanent filters, memoised in
   the ``FeasibilityCache``), the one the matcher would choose first. The
   matcher picks the least loaded capable worker, so the pool holding the
   least loaded connected worker wins; pools without a connected worker come
   after, by name. Counted once, it never makes two pools scale for one
   execution.
2. A pool's workers needed = its busy workers (something runs there and must
   finish) plus ``ceil(sum(count_s / per_worker_s))`` over its pending shapes,
   where ``per_worker_s`` is how many executions of shape ``s`` one idle worker
   of the pool holds at once (the tightest of capacity, cores, memory, disk,
   GPUs). Pending work fits no connected worker (the dispatcher places what
   fits at once), so it needs new workers. The result is kept within the
   pool's min and max.

Cost: O(pending shapes × pools) permanent checks, each memoised, plus
O(workers) to group the fleet: 10,000 pending executions of 100 shapes over
100 pools is 10,000 cached lookups, not 1,000,000 checks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING

from packaging.markers import default_environment

from flux import defaults
from flux.domain.labels import validate_labels
from flux.domain.quantity import format_bytes, parse_bytes
from flux.domain.worker import DEFAULT_RUNTIME, Gpu, WorkerResources, WorkerSoftware
from flux.matching.filters import permanent_rejection
from flux.matching.shape import Shape
from flux.matching.view import WorkerView, load_key

if TYPE_CHECKING:
    from flux.matching.scheduler import FeasibilityCache

POOL_LABEL = "flux/pool"
_MARKERS = default_environment()
DECLARED, LEARNED = "declared", "learned"
# Keys of one pool in a declaration file, and of its resources.
_FIELDS = ("name", "labels", "resources", "runtime", "packages", "capacity", "min", "max")
_RESOURCES = ("cpu", "memory", "gpu", "gpu_memory", "disk")
MAX_POOLS = 1000
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


# ---------------------------------------------------------------------- declarations


def parse_pools(document: object) -> list[PoolSpec]:
    """Pool declarations from a loaded YAML/JSON document: ``{"pools": [...]}``, a list, or one pool.

    Every error names the field (``pools[1].resources.memory``) and the accepted form.
    """
    if isinstance(document, Mapping) and "pools" in document:
        if set(document) != {"pools"}:
            extra = sorted(set(document) - {"pools"})
            raise ValueError(f"a pools file has the one key 'pools'; got also {', '.join(map(str, extra))}")
        items, where = document["pools"], "pools"
    elif isinstance(document, Mapping):
        items, where = [document], "pool"
    else:
        items, where = document, "pools"
    if not isinstance(items, list):
        raise TypeError(
            f"{where} must be a list of pools, each a mapping with a name; got {type(items).__name__}"
        )
    if len(items) > MAX_POOLS:
        raise ValueError(f"{where} has {len(items)} pools; at most {MAX_POOLS} are allowed")
    specs = [parse_pool(item, f"{where}[{i}]" if where == "pools" else where) for i, item in enumerate(items)]
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ValueError(f"pool {spec.name!r} is declared twice")
        seen.add(spec.name)
    return specs


def parse_pool(item: object, where: str = "pool") -> PoolSpec:
    if not isinstance(item, Mapping):
        raise TypeError(
            f"{where} must be a mapping with name, labels, resources, ...; got {type(item).__name__}"
        )
    unknown = sorted(str(k) for k in item if k not in _FIELDS)
    if unknown:
        raise ValueError(
            f"{where} has unknown key(s) {', '.join(unknown)}; the keys are {', '.join(_FIELDS)}"
        )
    name = validate_pool_name(item.get("name"), f"{where}.name")
    labels = validate_labels(item.get("labels") or {}, f"{where}.labels")
    if POOL_LABEL in labels:
        raise ValueError(f"{where}.labels must not set {POOL_LABEL}: the pool's name is that label")
    resources = item.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise TypeError(f"{where}.resources must be a mapping of {', '.join(_RESOURCES)}")
    unknown = sorted(str(k) for k in resources if k not in _RESOURCES)
    if unknown:
        raise ValueError(
            f"{where}.resources has unknown key(s) {', '.join(unknown)}; the keys are {', '.join(_RESOURCES)}"
        )
    runtime = item.get("runtime", DEFAULT_RUNTIME)
    if not isinstance(runtime, str) or not runtime.strip():
        raise ValueError(
            f"{where}.runtime must be a runtime as workers advertise it, e.g. 'python 3.12'; got {runtime!r}"
        )
    minimum = _whole(item.get("min", 0), f"{where}.min")
    maximum = _whole(item.get("max", 0), f"{where}.max")
    if maximum and minimum > maximum:
        raise ValueError(
            f"{where}.min ({minimum}) must be at most {where}.max ({maximum}; 0 means no maximum)"
        )
    capacity = _whole(item.get("capacity", defaults.CAPACITY), f"{where}.capacity")
    if capacity < 1:
        raise ValueError(f"{where}.capacity must be at least 1 concurrent execution; got {capacity}")
    gpu = _whole(resources.get("gpu", 0), f"{where}.resources.gpu")
    gpu_memory = _bytes(resources.get("gpu_memory", 0), f"{where}.resources.gpu_memory")
    if gpu_memory and not gpu:
        raise ValueError(f"{where}.resources.gpu_memory is the VRAM of each GPU: set resources.gpu too")
    return PoolSpec(
        name=name,
        labels=MappingProxyType(labels),
        cpu=_whole(resources.get("cpu", 0), f"{where}.resources.cpu"),
        memory=_bytes(resources.get("memory", 0), f"{where}.resources.memory"),
        gpu=gpu,
        gpu_memory=gpu_memory,
        disk=_bytes(resources.get("disk", 0), f"{where}.resources.disk"),
        runtime=runtime.strip(),
        packages=MappingProxyType(_packages(item.get("packages") or {}, f"{where}.packages")),
        capacity=capacity,
        min_workers=minimum,
        max_workers=maximum,
    )


def _whole(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 1_000_000:
        raise ValueError(f"{field} must be a whole number from 0 to 1000000; got {value!r}")
    return value


def _bytes(value: object, field: str) -> int:
    return parse_bytes(value or 0, field)


def _packages(value: object, field: str) -> dict[str, str]:
    """``{"torch": "2.4.0"}`` or ``["torch==2.4.0"]``: what a worker of the pool has installed."""
    pairs: list[tuple[object, object]]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, list):
        pairs = []
        for item in value:
            name, sep, version = str(item).partition("==")
            if not sep or not isinstance(item, str):
                raise ValueError(
                    f"{field} entries must be 'name==version', e.g. 'torch==2.4.0'; got {item!r}"
                )
            pairs.append((name.strip(), version.strip()))
    else:
        raise TypeError(f"{field} must be a mapping of name to version or a list of 'name==version'")
    result: dict[str, str] = {}
    for name, version in pairs:
        if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
            raise ValueError(f"{field} entry {name!r}: {version!r} must be a name and an installed version")
        result[name] = version
    return result


# ---------------------------------------------------------------------- demand


@dataclass(frozen=True, slots=True)
class PoolDemand:
    """One pool now: its workers, the work it should run, and the workers that needs."""

    spec: PoolSpec
    workers: int  # connected and accepting
    busy_workers: int  # of those, the ones running something
    pending: int  # pending executions counted in this pool
    running: int  # executions held by its workers
    needed: int  # busy workers + what the pending need, before min/max
    desired: int  # ``needed`` kept within min and max: what the pool should have

    @property
    def active(self) -> bool:
        """KEDA's IsActive: there is work for the pool (pending or running)."""
        return self.pending > 0 or self.running > 0


def pool_of(view: WorkerView) -> str:
    return view.labels.get(POOL_LABEL, "")


def merge_specs(declared: Iterable[PoolSpec], learned_specs: Iterable[PoolSpec]) -> list[PoolSpec]:
    """Declared pools, plus learned ones not declared (a declaration wins), by name."""
    specs = {spec.name: spec for spec in learned_specs}
    specs.update((spec.name, spec) for spec in declared)
    return [specs[name] for name in sorted(specs)]


def compute_demand(
    specs: Sequence[PoolSpec],
    workers: Iterable[WorkerView],
    pending: Iterable[tuple[Shape, int]],
    cache: FeasibilityCache | None = None,
) -> dict[str, PoolDemand]:
    """Demand per pool (see the module docstring): ``pending`` is (shape, count) per pending shape;
    ``workers`` the accepting workers (paused ones too: a pause is not a reason to scale)."""
    members: dict[str, list[WorkerView]] = {spec.name: [] for spec in specs}
    for view in workers:
        pool = pool_of(view)
        if pool in members:
            members[pool].append(view)
    # The order the matcher would try the pools in: the one with the least loaded worker first.
    order = sorted(
        specs,
        key=lambda s: (
            (0, *load_key(min(members[s.name], key=load_key))) if members[s.name] else (1, 0.0, 0.0, s.name)
        ),
    )
    views = {spec.name: spec.view() for spec in specs}
    check = cache.permanent if cache is not None else permanent_rejection
    counted: dict[str, int] = dict.fromkeys(members, 0)
    load: dict[str, Fraction] = {name: Fraction(0) for name in members}
    for shape, count in pending:
        if count <= 0:
            continue
        for spec in order:
            if check(shape, views[spec.name]) is None:
                counted[spec.name] += count
                load[spec.name] += Fraction(count, spec.per_worker(shape))
                break
    result: dict[str, PoolDemand] = {}
    for spec in specs:
        mine = members[spec.name]
        busy = sum(1 for v in mine if v.active > 0)
        needed = busy + math.ceil(load[spec.name])
        desired = max(spec.min_workers, needed)
        if spec.max_workers:
            desired = min(desired, spec.max_workers)
        result[spec.name] = PoolDemand(
            spec=spec,
            workers=len(mine),
            busy_workers=busy,
            pending=counted[spec.name],
            running=sum(v.active for v in mine),
            needed=needed,
            desired=desired,
        )
    return result


def could_run(
    shape: Shape, demands: Iterable[PoolDemand], cache: FeasibilityCache | None = None
) -> list[PoolDemand]:
    """The pools whose idle worker could run ``shape``, for explain: "pool a100 could run it (0 workers)"."""
    check = cache.permanent if cache is not None else permanent_rejection
    return [d for d in demands if check(shape, d.spec.view()) is None]


def could_run_text(pools: Sequence[PoolDemand]) -> str:
    """``pool a100 could run it (0 workers)``; several pools are listed, the first three named."""
    if not pools:
        return ""
    named = [
        f"pool {d.spec.name} could run it ({d.workers} worker{'s' if d.workers != 1 else ''})"
        for d in pools[:3]
    ]
    more = f", and {len(pools) - 3} more pools" if len(pools) > 3 else ""
    return "; ".join(named) + more
