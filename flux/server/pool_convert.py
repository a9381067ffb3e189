"""Pools to and from ``flux.v1.pools``: specs validated as a declaration file is, demand as ``Pool``."""

from __future__ import annotations

from collections.abc import Iterable

from flux.errors import InvalidArgument
from flux.matching.pools import PoolDemand, PoolSpec, parse_pool
from flux.v1 import pools_pb2


def spec_to_proto(spec: PoolSpec) -> pools_pb2.PoolSpec:
    return pools_pb2.PoolSpec(
        name=spec.name,
        labels=dict(spec.labels),
        cpu=spec.cpu,
        memory=spec.memory,
        gpu=spec.gpu,
        gpu_memory=spec.gpu_memory,
        disk=spec.disk,
        runtime=spec.runtime,
        packages=dict(spec.packages),
        capacity=spec.capacity,
        min_workers=spec.min_workers,
        max_workers=spec.max_workers,
        source=spec.source,
    )


def spec_from_proto(message: pools_pb2.PoolSpec, where: str) -> PoolSpec:
    """Validated as a declaration file is (``parse_pool``), so the errors name the same fields."""
    resources = {
        "cpu": message.cpu,
        "memory": message.memory,
        "gpu": message.gpu,
        "gpu_memory": message.gpu_memory,
        "disk": message.disk,
    }
    document: dict[str, object] = {
        "name": message.name,
        "labels": dict(message.labels),
        "resources": {k: v for k, v in resources.items() if v},
        "packages": dict(message.packages),
        "min": message.min_workers,
        "max": message.max_workers,
    }
    if message.runtime:
        document["runtime"] = message.runtime
    if message.capacity:
        document["capacity"] = message.capacity
    for field in ("cpu", "memory", "gpu", "gpu_memory", "disk"):
        if resources[field] < 0:
            raise InvalidArgument(f"{where}.{field} must be >= 0; got {resources[field]}")
    if message.min_workers < 0 or message.max_workers < 0:
        raise InvalidArgument(f"{where}.min_workers and max_workers must be >= 0")
    try:
        return parse_pool(document, where)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(str(exc)) from None


def pool_to_proto(demand: PoolDemand) -> pools_pb2.Pool:
    return pools_pb2.Pool(
        spec=spec_to_proto(demand.spec),
        workers=demand.workers,
        busy_workers=demand.busy_workers,
        pending=demand.pending,
        running=demand.running,
        needed_workers=demand.needed,
        demand_workers=demand.desired,
        active=demand.active,
    )


def pools_to_proto(demands: Iterable[PoolDemand]) -> list[pools_pb2.Pool]:
    return [pool_to_proto(d) for d in sorted(demands, key=lambda d: d.spec.name)]
