"""Pool declarations: the document ``flux pool apply`` sends, read into ``PoolSpec``s."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from flux import defaults
from flux.domain.labels import validate_labels
from flux.domain.quantity import parse_bytes
from flux.domain.worker import DEFAULT_RUNTIME
from flux.matching.pools.spec import POOL_LABEL, PoolSpec, validate_pool_name

# Keys of one pool in a declaration file, and of its resources.
_FIELDS = ("name", "labels", "resources", "runtime", "packages", "capacity", "min", "max")
_RESOURCES = ("cpu", "memory", "gpu", "gpu_memory", "disk")
MAX_POOLS = 1000


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
