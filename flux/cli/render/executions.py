"""Executions: one execution, a listing of them, and why one is pending (``explain``)."""

from __future__ import annotations

import json
from typing import Any

from flux.cli.render.common import duration, table
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
        "priority": e.priority,
        "tenant": e.tenant,
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
        f"priority   {d['priority']}",
        f"tenant     {d['tenant'] or '-'}",
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
        "queued_ahead": x.queued_ahead if x.HasField("queued_ahead") else None,
        "priority": x.priority,
        "nominated_worker": x.nominated_worker or None,
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


def queued_ahead(count: int) -> str:
    return "next in line" if count == 0 else f"{count} with the same requirements ahead"


def explanation_text(x: control_pb2.Explanation) -> str:
    lines = [x.summary]
    if state_name(x.state) == "CREATED":
        verdict = (
            "infeasible: no connected worker could ever run it" if x.infeasible else "waiting for capacity"
        )
        verdict += f"; priority {x.priority}"
        if x.HasField("queued_ahead"):
            verdict += f"; {queued_ahead(x.queued_ahead)}"
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


def executions_text(executions: list[control_pb2.Execution], now_ms: int, width: int | None = None) -> str:
    if not executions:
        return "no executions"
    rows = [
        (e.execution_id, f"{e.workflow.name} v{e.workflow.version}", state_name(e.state),
         e.worker or "-", str(e.attempt), str(e.priority),
         f"{duration((now_ms - e.created_at_ms) / 1000)} ago")
        for e in executions
    ]  # fmt: skip
    return table(
        ("EXECUTION", "WORKFLOW", "STATE", "WORKER", "ATTEMPT", "PRIORITY", "SUBMITTED"), rows,
        right=frozenset({4, 5}), width=width,
        drop=(5, 4, 6), shrink=(1, 3, 0),  # PRIORITY, ATTEMPT, SUBMITTED; WORKFLOW, WORKER, EXECUTION
    )  # fmt: skip
