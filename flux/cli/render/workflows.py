"""Registered workflows: ``flux workflow list|show``."""

from __future__ import annotations

from typing import Any

from flux.cli.render.common import labels_text, requests_text, when
from flux.v1 import control_pb2


def workflow_dict(w: control_pb2.WorkflowInfo) -> dict[str, Any]:
    r = w.requests
    return {
        "name": w.name,
        "version": w.version,
        "version_count": w.version_count,
        "source_hash": w.source_hash,
        "entrypoint": w.entrypoint,
        "filename": w.filename,
        "runtime": w.runtime,
        "requests": {
            "cpu": r.cpu,
            "memory": r.memory,
            "gpu": r.gpu,
            "gpu_memory": r.gpu_memory,
            "disk": r.disk,
            "packages": list(r.packages),
        },
        "affinity": dict(w.affinity),
        "max_attempts": w.max_attempts,
        "priority": w.priority,
        "tenant": w.tenant,
        "placement": w.placement,
        "registered_at_ms": w.registered_at_ms,
        "gang": (
            {"size": w.gang.size, "same": w.gang.same or None, "spread": w.gang.spread or None}
            if w.HasField("gang")
            else None
        ),
    }


def _gang_text(w: control_pb2.WorkflowInfo) -> str:
    if not w.HasField("gang"):
        return "one worker"
    g = w.gang
    return (
        f"{g.size} members"
        + (f", same {g.same}" if g.same else "")
        + (f", spread {g.spread}" if g.spread else "")
    )


def workflow_text(w: control_pb2.WorkflowInfo) -> str:
    return "\n".join(
        (
            f"workflow     {w.name} v{w.version} (of {w.version_count})",
            f"runtime      {w.runtime}",
            f"entrypoint   {w.entrypoint} in {w.filename or '-'}",
            f"source hash  {w.source_hash}",
            f"requests     {requests_text(w.requests)}",
            f"affinity     {labels_text(w.affinity)}",
            f"gang         {_gang_text(w)}",
            f"max attempts {w.max_attempts}",
            f"priority     {w.priority}",
            f"tenant       {w.tenant or 'default'}",
            f"placement    {w.placement or 'the server default'}",
            f"registered   {when(w.registered_at_ms)}",
        )
    )
