"""Executions: one execution, a listing of them, and why one is pending (``explain``)."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterable
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


def attempt_dict(a: control_pb2.Attempt) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "worker": a.worker,
        "started_at_ms": a.started_at_ms,
        "ended_at_ms": a.ended_at_ms,
        "reason": a.reason,
        "error_type": a.error_type or None,
        "error_message": a.error_message or None,
    }


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
        "reason": e.reason or None,
        "max_attempts": e.policy.retry.max_attempts if e.HasField("policy") else None,
        "not_before_ms": e.not_before_ms or None,
        "heartbeat": _json_value(e.heartbeat_json) if e.heartbeat_json else None,
        "attempts": [attempt_dict(a) for a in e.attempts],
        "batch_id": e.batch_id or None,
        # What it waits for (client.run(..., after=[...])), how, and how many have not yet ended so.
        "after": list(e.after),
        "when": e.when or None,
        "dependencies_waiting": e.dependencies_waiting,
    }
    if e.HasField("error"):
        result["error"] = {"type": e.error.type, "message": e.error.message, "traceback": e.error.traceback}
    if e.gang_size:
        result["gang_size"] = e.gang_size
        result["gang_members"] = [
            {"rank": m.rank, "worker": m.worker, "address": m.address or None, "gpu_indices": list(m.gpu_indices),
             "claimed": m.claimed, "completed": m.completed,
             "output": _json_value(m.output_json) if m.completed else None}
            for m in e.gang_members
        ]  # fmt: skip
    return result


def attempt_lines(e: control_pb2.Execution, now: float | None = None) -> list[str]:
    """One line per ended attempt, e.g. ``attempt 2 of 5 failed on w3: ConnectionError('reset')``,
    and when a retry waits, ``next try at 12:00:03 (in 1.2 s)``."""
    total = e.policy.retry.max_attempts if e.HasField("policy") else 0
    return attempts_said(e.attempts, total, e.not_before_ms, e.state, now)


def attempts_said(
    attempts: Iterable[control_pb2.Attempt],
    total: int,
    not_before_ms: int,
    state: int,
    now: float | None = None,
) -> list[str]:
    """``attempt_lines`` for an execution or an explanation (both carry the attempts)."""
    of = f" of {total}" if total else ""
    lines = []
    for a in attempts:
        if a.reason == "completed":
            lines.append(f"attempt {a.attempt}{of} completed on {a.worker}")
            continue
        what = {"error": "failed", "preempted": "was preempted"}.get(a.reason, f"ended ({a.reason})")
        error = f": {a.error_type}({a.error_message!r})" if a.error_type else ""
        lines.append(f"attempt {a.attempt}{of} {what} on {a.worker or '-'}{error}")
    if not_before_ms and state == control_pb2.EXECUTION_STATE_CREATED:
        at = not_before_ms / 1000
        left = max(0.0, at - (time.time() if now is None else now))
        clock = datetime.datetime.fromtimestamp(at).strftime("%H:%M:%S")
        lines.append(f"next try at {clock} (in {left:.1f} s)")
    return lines


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
    if d["batch_id"]:
        lines.append(f"batch      {d['batch_id']} (flux batch show {d['batch_id']})")
    if d["after"]:
        waiting = (
            f"waiting for {d['dependencies_waiting']} of {len(d['after'])}, "
            if d["dependencies_waiting"]
            else ""
        )
        lines.append(f"after      {', '.join(d['after'])} ({waiting}when {d['when']})")
    if e.gang_size:
        lines.append(f"gang       {e.gang_size} members" + ("" if e.gang_members else ", not placed"))
        for m in d["gang_members"]:
            done = "completed" if m["completed"] else "claimed" if m["claimed"] else "dispatched"
            gpus = f" gpus {m['gpu_indices']}" if m["gpu_indices"] else ""
            lines.append(f"  rank {m['rank']}  {m['worker']}  {m['address'] or '-'}{gpus}  {done}")
    if d["state"] == "COMPLETED":
        lines.append(f"output     {json.dumps(d['output'])}")
    if d["error"]:
        lines.append(f"error      {d['error']['type']}: {d['error']['message']}")
    if d["reason"]:
        lines.append(f"reason     {d['reason']}")
    if d["heartbeat"] is not None:
        lines.append(f"heartbeat  {json.dumps(d['heartbeat'])}")
    lines.extend(attempt_lines(e))
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
        "max_attempts": x.max_attempts or None,
        "not_before_ms": x.not_before_ms or None,
        "attempts": [attempt_dict(a) for a in x.attempts],
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
    said = attempts_said(x.attempts, x.max_attempts, x.not_before_ms, x.state)
    if said:
        lines.append("")
        lines.extend(said)
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
