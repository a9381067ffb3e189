"""The worker directory: what a replica publishes about its workers in the database.

Each replica writes ``info`` (labels, capacity, software: when a worker connects)
and ``load`` (resources and reservations: every heartbeat) as JSON beside the
worker's row, so any replica can list, count and explain against the whole fleet.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from flux.dispatcher.state.worker_entry import Elsewhere, WorkerEntry
from flux.domain.worker import Gpu, ResourceLimit, WorkerResources, WorkerSoftware
from flux.matching import DEFAULT_CAPACITY, Amounts, WorkerView


def info_of(entry: WorkerEntry) -> dict[str, Any]:
    return {
        "labels": dict(entry.labels),
        "capacity": entry.capacity,
        "transport": entry.transport,
        "packages": dict(entry.software.packages),
        "markers": dict(entry.software.marker_environment),
        "runtimes": list(entry.software.runtimes),
    }


def load_of(entry: WorkerEntry) -> dict[str, Any]:
    r = entry.resources
    return {
        "resources": [r.cpu_total, r.cpu_available, r.memory_total, r.memory_available, r.disk_total,
                      r.disk_free, [[g.index, g.uuid, g.name, g.memory_total, g.memory_free] for g in r.gpus]],
        "active": len(entry.holdings),
        "reserved": [entry.reserved.cpu, entry.reserved.memory, entry.reserved.disk],
        # Reserved since the worker's last report, which its observed free amounts do not show yet.
        "unreported": [entry.unreported.cpu, entry.unreported.memory, entry.unreported.disk],
        "held_gpus": sorted(entry.held_gpus),
        # Which container (cgroup) or flag limits set the totals, for listings and explain.
        "limits": [[x.resource, x.source, x.limit, x.host] for x in r.limits],
        "draining": entry.draining,
        "paused": entry.paused,
        "seen": entry.last_seen,
    }  # fmt: skip


def entry_of(name: str, info: dict[str, Any]) -> WorkerEntry:
    view = view_of(name, info)
    return WorkerEntry(
        name=name,
        session_token="",
        labels=MappingProxyType(dict(view.labels)),
        capacity=view.capacity,
        resources=view.resources,
        software=view.software,
        transport=info.get("transport", "grpc"),
        draining=info.get("draining", False),
        paused=view.paused,
        last_seen=info.get("seen", 0.0),
        reserved=view.reserved,
        unreported=view.unreported,
        elsewhere=Elsewhere(info.get("replica", ""), view.active, view.held_gpus),
    )


def view_of(name: str, info: dict[str, Any]) -> WorkerView:
    cpu_total, cpu_free, mem_total, mem_free, disk_total, disk_free, gpus = info["resources"]
    return WorkerView(
        name=name,
        resources=WorkerResources(
            cpu_total,
            cpu_free,
            mem_total,
            mem_free,
            disk_total,
            disk_free,
            tuple(Gpu(*g) for g in gpus),
            limits=tuple(ResourceLimit(*x) for x in info.get("limits", ())),
        ),
        labels=MappingProxyType(info.get("labels", {})),
        software=WorkerSoftware(info.get("packages", {}), info.get("markers", {}), info.get("runtimes", ())),
        capacity=info.get("capacity", DEFAULT_CAPACITY),
        active=info["active"],
        reserved=Amounts(*info["reserved"]),
        unreported=Amounts(*info.get("unreported", (0, 0, 0))),
        held_gpus=frozenset(info["held_gpus"]),
        paused=info.get("paused", False),
    )
