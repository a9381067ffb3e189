"""Turn control-plane answers into what a person reads, or one JSON object for scripts."""

from __future__ import annotations

import json
from typing import Any

from flux.domain.quantity import format_bytes
from flux.v1 import control_pb2

STATES = {
    control_pb2.EXECUTION_STATE_CREATED: "CREATED",
    control_pb2.EXECUTION_STATE_SCHEDULED: "SCHEDULED",
    control_pb2.EXECUTION_STATE_RUNNING: "RUNNING",
    control_pb2.EXECUTION_STATE_COMPLETED: "COMPLETED",
    control_pb2.EXECUTION_STATE_FAILED: "FAILED",
    control_pb2.EXECUTION_STATE_CANCELLED: "CANCELLED",
}


def state_name(state: int) -> str:
    return STATES.get(state, "UNKNOWN")


def _json_value(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def execution_dict(e: control_pb2.Execution) -> dict[str, Any]:
    result: dict[str, Any] = {
        "execution_id": e.execution_id,
        "workflow": e.workflow.name,
        "version": e.workflow.version,
        "state": state_name(e.state),
        "worker": e.worker or None,
        "attempt": e.attempt,
        "generation": e.generation,
        "gpu_indices": list(e.gpu_indices),
        "input": _json_value(e.input_json),
        "output": _json_value(e.output_json) if e.state == control_pb2.EXECUTION_STATE_COMPLETED else None,
        "error": None,
        "created_at_ms": e.created_at_ms,
        "updated_at_ms": e.updated_at_ms,
    }
    if e.HasField("error"):
        result["error"] = {"type": e.error.type, "message": e.error.message, "traceback": e.error.traceback}
    return result


def execution_text(e: control_pb2.Execution) -> str:
    d = execution_dict(e)
    lines = [
        f"execution  {d['execution_id']}",
        f"workflow   {d['workflow']} v{d['version']}",
        f"state      {d['state']}",
        f"worker     {d['worker'] or '-'}",
        f"attempt    {d['attempt']}",
    ]
    if d["gpu_indices"]:
        lines.append(f"gpus       {d['gpu_indices']}")
    if d["state"] == "COMPLETED":
        lines.append(f"output     {json.dumps(d['output'])}")
    if d["error"]:
        lines.append(f"error      {d['error']['type']}: {d['error']['message']}")
    return "\n".join(lines)


def explanation_dict(x: control_pb2.Explanation) -> dict[str, Any]:
    return {
        "execution_id": x.execution_id,
        "state": state_name(x.state),
        "summary": x.summary,
        "infeasible": x.infeasible,
        "workers": [
            {
                "worker": v.worker,
                "fits": v.fits,
                "rejections": [
                    {
                        "reason": r.reason,
                        "detail": r.detail,
                        "permanent": r.permanent,
                        "wanted": r.wanted,
                        "offered": r.offered,
                    }
                    for r in v.rejections
                ],
            }  # fmt: skip
            for v in x.workers
        ],
    }


def explanation_text(x: control_pb2.Explanation) -> str:
    lines = [x.summary]
    if state_name(x.state) == "CREATED":
        verdict = (
            "infeasible: no connected worker could ever run it" if x.infeasible else "waiting for capacity"
        )
        lines.append(verdict)
    rows = [
        (v.worker, "fits" if v.fits else ("never" if any(r.permanent for r in v.rejections) else "busy"),
         "; ".join(r.detail for r in v.rejections) or "-")
        for v in x.workers
    ]  # fmt: skip
    if rows:
        lines.append("")
        lines.append(table(("WORKER", "VERDICT", "REASONS"), rows))
    return "\n".join(lines)


def worker_dict(w: control_pb2.WorkerInfo) -> dict[str, Any]:
    r = w.resources
    return {
        "name": w.name,
        "connected": w.connected,
        "transport": w.transport,
        "labels": dict(w.labels),
        "capacity": w.capacity,
        "active_executions": w.active_executions,
        "resources": {
            "cpu_total": r.cpu_total, "cpu_available": r.cpu_available,
            "memory_total": r.memory_total, "memory_available": r.memory_available,
            "disk_total": r.disk_total, "disk_free": r.disk_free,
            "gpus": [{"index": g.index, "name": g.name, "memory_total": g.memory_total, "memory_free": g.memory_free}
                     for g in r.gpus],
        },
        "reserved": {"cpu": w.reserved.cpu, "memory": w.reserved.memory, "disk": w.reserved.disk,
                     "gpu_indices": list(w.reserved.gpu_indices)},
        "package_count": w.package_count,
    }  # fmt: skip


def workers_text(response: control_pb2.ListWorkersResponse) -> str:
    if not response.workers:
        return "no workers registered"
    rows = []
    for w in response.workers:
        r, held = w.resources, w.reserved
        rows.append(
            (
                w.name,
                "connected" if w.connected else "disconnected",
                f"{w.active_executions}/{w.capacity}",
                f"{held.cpu}/{r.cpu_total} cores",
                f"{format_bytes(held.memory)}/{format_bytes(r.memory_total)}",
                f"{len(held.gpu_indices)}/{len(r.gpus)}",
                f"{format_bytes(r.disk_free)} free",
                ",".join(f"{k}={v}" for k, v in sorted(w.labels.items())) or "-",
            )
        )
    return table(
        ("NAME", "STATE", "ACTIVE", "CPU RESERVED", "MEMORY RESERVED", "GPUS", "DISK", "LABELS"), rows
    )


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in (header, *rows)]  # fmt: skip
    return "\n".join(lines)
