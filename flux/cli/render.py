"""Turn control-plane answers into what a person reads, or one JSON object for scripts."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from typing import Any

from flux.cli import tables
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


def worker_dict(w: control_pb2.WorkerInfo) -> dict[str, Any]:
    r = w.resources
    return {
        "name": w.name,
        "connected": w.connected,
        "draining": w.draining,
        "paused": w.paused,
        "runtimes": list(w.runtimes),
        "transport": w.transport,
        "labels": dict(w.labels),
        "capacity": w.capacity,
        "active_executions": w.active_executions,
        "last_seen_ms": w.last_seen_ms,
        "resources": {
            "cpu_total": r.cpu_total, "cpu_available": r.cpu_available,
            "memory_total": r.memory_total, "memory_available": r.memory_available,
            "disk_total": r.disk_total, "disk_free": r.disk_free,
            "gpus": [{"index": g.index, "name": g.name, "memory_total": g.memory_total, "memory_free": g.memory_free}
                     for g in r.gpus],
            # Which limit below the host set a total (a container's cgroup, the affinity mask, a cap).
            "limits": [{"resource": x.resource, "source": x.source, "limit": x.limit, "host": x.host}
                       for x in r.limits],
        },
        "reserved": {"cpu": w.reserved.cpu, "memory": w.reserved.memory, "disk": w.reserved.disk,
                     "gpu_indices": list(w.reserved.gpu_indices)},
        # What the matcher counts as free now (observed, less reservations): explain's figure.
        "free": {"cpu": w.free.cpu, "memory": w.free.memory, "disk": w.free.disk, "gpus": w.free.gpus},
        "package_count": w.package_count,
    }  # fmt: skip


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def byte_pair(used: int, total: int) -> str:
    """``used/total`` in the unit that suits the larger: ``12.0/16.0 GiB``."""
    largest, unit = float(max(used, total)), 0
    while largest >= 1024 and unit < len(_UNITS) - 1:
        largest, unit = largest / 1024, unit + 1
    if unit == 0:
        return f"{used}/{total} B"
    scale = 1024**unit
    return f"{used / scale:.1f}/{total / scale:.1f} {_UNITS[unit]}"


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``, ``3d04h``: two units at most, for a glance."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _labels(labels: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def _worker_state(w: control_pb2.WorkerInfo) -> str:
    if not w.connected:
        return "disconnected"
    return "draining" if w.draining else "paused" if w.paused else "connected"


WORKER_HEADER = (
    "NAME",
    "STATE",
    "TRANSPORT",
    "LOAD",
    "CPU",
    "MEMORY",
    "GPUS",
    "DISK",
    "SEEN",
    "LIMITS",
    "LABELS",
)
# LOAD is a number: right-aligned. CPU to DISK are phrases ("free 26/32 (reserved 6)"): left-aligned,
# so each header sits over the start of its cells.
_WORKER_NUMBERS = frozenset({3})
# Too wide for the terminal: the short form (free/total, right-aligned), then these columns go first.
_COMPACT_NUMBERS = frozenset(range(3, 8))
_WORKER_EXPENDABLE = (9, 8, 2, 7, 6)  # LIMITS, SEEN, TRANSPORT, DISK, GPUS
_WORKER_SHRINKABLE = (10, 0)  # LABELS, NAME


def _free(free: int, total: int, reserved: int) -> str:
    return f"free {free}/{total} (reserved {reserved})"


def _free_bytes(free: int, total: int, reserved: int) -> str:
    return f"free {byte_pair(free, total)} (reserved {format_bytes(reserved)})"


def _limits(limits: Any) -> str:
    """``cpu=cpu.max,memory=memory.max``: which limit below the host set each total; ``-`` for none."""
    return ",".join(f"{x.resource}={x.source.removeprefix('cgroup ')}" for x in limits) or "-"


def worker_row(w: control_pb2.WorkerInfo, now_ms: int) -> tuple[str, ...]:
    """Free over advertised per resource, and what running work has reserved.

    Free is what the matcher counts (observed free, less reservations), the
    figure ``explain`` quotes: a host loaded by other processes shows little
    free with nothing reserved, and the two columns say which is which.
    """
    r, held, free = w.resources, w.reserved, w.free
    seen = "-" if not w.last_seen_ms else f"{duration((now_ms - w.last_seen_ms) / 1000)} ago"
    return (
        w.name,
        _worker_state(w),
        w.transport or "-",
        f"{w.active_executions}/{w.capacity}",
        _free(free.cpu, r.cpu_total, held.cpu),
        _free_bytes(free.memory, r.memory_total, held.memory),
        _free(free.gpus, len(r.gpus), len(held.gpu_indices)),
        _free_bytes(free.disk, r.disk_total, held.disk),
        seen,
        _limits(r.limits),
        _labels(w.labels),
    )


def compact_worker_row(w: control_pb2.WorkerInfo, now_ms: int) -> tuple[str, ...]:
    """``worker_row`` for a narrow terminal: free/total only (``flux workers list --json`` has the rest)."""
    r, free = w.resources, w.free
    full = worker_row(w, now_ms)
    return (
        *full[:4],
        f"{free.cpu}/{r.cpu_total}",
        byte_pair(free.memory, r.memory_total),
        f"{free.gpus}/{len(r.gpus)}",
        byte_pair(free.disk, r.disk_total),
        *full[8:],
    )


def workers_text(workers: Sequence[control_pb2.WorkerInfo], now_ms: int, width: int | None = None) -> str:
    """The fleet as a table; ``now_ms`` (Unix ms) dates SEEN, so the output depends on its inputs only.

    Within ``width`` columns where it can be: the full table when it fits, else free/total alone
    per resource, then the less needed columns left out (a note says which).
    """
    if not workers:
        return "no workers registered"
    full = table(WORKER_HEADER, [worker_row(w, now_ms) for w in workers], right=_WORKER_NUMBERS)
    if width is None or max(len(line) for line in full.splitlines()) <= width:
        return full
    return table(
        WORKER_HEADER, [compact_worker_row(w, now_ms) for w in workers], right=_COMPACT_NUMBERS,
        width=width, drop=_WORKER_EXPENDABLE, shrink=_WORKER_SHRINKABLE,
    )  # fmt: skip


# ---------------------------------------------------------------------- flux status

REASON_ORDER = ("busy", "infeasible", "no_worker")
REQUEUE_ORDER = ("released", "worker_lost", "ack_deadline", "stream_overflowed", "preempted")
TENANT_RESOURCES = ("cpu", "memory", "gpu", "gpu_memory")


def tenant_usage(t: Any) -> str:
    """``3/4 cores, 1.0/2.0 GiB memory``: usage against quota where it has one, else what it uses."""
    parts = []
    for resource in TENANT_RESOURCES:
        used = getattr(t.usage, resource)
        limited = t.quota.HasField(resource)
        if not used and not limited:
            continue
        if resource == "cpu":
            parts.append(f"{used}/{t.quota.cpu if limited else '-'} cores")
        elif resource == "gpu":
            parts.append(f"{used}/{t.quota.gpu if limited else '-'} GPUs")
        else:
            what = "memory" if resource == "memory" else "VRAM"
            pair = byte_pair(used, getattr(t.quota, resource)) if limited else f"{format_bytes(used)}/-"
            parts.append(f"{pair} {what}")
    return ", ".join(parts) or "nothing held"


def requests_text(r: Any) -> str:
    """A ResourceRequest in the words a workflow declares it: ``cpu=4 memory=8.0 GiB gpu=1``."""
    parts = []
    if r.cpu:
        parts.append(f"cpu={r.cpu}")
    if r.memory:
        parts.append(f"memory={format_bytes(r.memory)}")
    if r.gpu:
        parts.append(f"gpu={r.gpu}")
    if r.gpu_memory:
        parts.append(f"gpu_memory={format_bytes(r.gpu_memory)}")
    if r.disk:
        parts.append(f"disk={format_bytes(r.disk)}")
    parts.extend(r.packages)
    return " ".join(parts) or "-"


def _histogram_dict(h: control_pb2.LatencyHistogram) -> dict[str, Any]:
    return {
        "bounds": list(h.bounds),
        "counts": list(h.counts),
        "sum": h.sum,
        "count": h.count,
        "p50": quantile(h, 0.5),
        "p99": quantile(h, 0.99),
    }


def quantile(h: control_pb2.LatencyHistogram, q: float) -> float | None:
    """The upper bound of the bucket holding the q-quantile (None when empty or above every bound)."""
    if not h.count:
        return None
    rank, seen = q * h.count, 0
    for bound, count in zip(h.bounds, h.counts, strict=False):
        seen += count
        if seen >= rank:
            return bound
    return None


def status_dict(s: control_pb2.ClusterStatus) -> dict[str, Any]:
    fleet, c = s.fleet, s.counters

    def allocation(a: control_pb2.Allocation) -> dict[str, int]:
        return {"cpu": a.cpu, "memory": a.memory, "disk": a.disk, "gpus": a.gpus}

    return {
        "now_ms": s.now_ms,
        "started_at_ms": s.started_at_ms,
        "fleet": {
            "connected_by_transport": dict(sorted(fleet.connected_by_transport.items())),
            "connected": sum(fleet.connected_by_transport.values()),
            "disconnected": fleet.disconnected,
            "draining": fleet.draining,
            "allocatable": allocation(fleet.allocatable),
            "reserved": allocation(fleet.reserved),
            "free": allocation(fleet.free),
            "active_executions": fleet.active_executions,
            "capacity": fleet.capacity,
        },
        "workers": [worker_dict(w) for w in s.workers],
        "workers_omitted": s.workers_omitted,
        "pending": [
            {
                "count": p.count,
                "oldest_wait_ms": p.oldest_wait_ms,
                "oldest_execution_id": p.oldest_execution_id,
                "oldest_workflow": p.oldest_workflow,
                "requests": {"cpu": p.requests.cpu, "memory": p.requests.memory, "gpu": p.requests.gpu,
                             "gpu_memory": p.requests.gpu_memory, "disk": p.requests.disk,
                             "packages": list(p.requests.packages)},
                "affinity": dict(p.affinity),
                "reason": p.reason,
                "summary": p.summary,
                "nominated_worker": p.nominated_worker or None,
            }  # fmt: skip
            for p in s.pending
        ],
        "pending_shapes_omitted": s.pending_shapes_omitted,
        "pending_by_reason": {reason: s.pending_by_reason.get(reason, 0) for reason in REASON_ORDER},
        "executions": {state_name(e.state): e.count for e in s.executions},
        "counters": {
            "submitted": c.submitted, "dispatched": c.dispatched, "claimed": c.claimed,
            "completed": c.completed, "failed": c.failed, "cancelled": c.cancelled,
            "requeued": dict(sorted(c.requeued.items())),
            "ack_deadline_expiries": c.ack_deadline_expiries,
            "preempted": dict(sorted(c.preempted.items())),
            "stream_connects": c.stream_connects, "stream_reconnects": c.stream_reconnects,
        },
        "latency_seconds": {h.stage: _histogram_dict(h) for h in s.latencies},
        "tenants": [
            {"name": t.name, "pending": t.pending,
             "usage": {r: getattr(t.usage, r) for r in TENANT_RESOURCES},
             "quota": {r: getattr(t.quota, r) for r in TENANT_RESOURCES if t.quota.HasField(r)}}
            for t in s.tenants
        ],
        "pools": [
            {"name": p.spec.name, "source": p.spec.source, "workers": p.workers, "busy_workers": p.busy_workers,
             "pending": p.pending, "running": p.running, "demand_workers": p.demand_workers, "active": p.active}
            for p in s.pools
        ],
    }  # fmt: skip


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"<={seconds * 1000:g} ms" if seconds < 1 else f"<={seconds:g} s"


PENDING_HEADER = ("COUNT", "OLDEST", "WORKFLOW", "REQUESTS", "AFFINITY", "REASON", "NOMINATED", "WHY")


def _wrapped(lines: list[str], width: int | None) -> list[str]:
    """Summary lines (``label       text``) wrapped to ``width``, continuing under the text."""
    if width is None:
        return lines
    out = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent=" " * 12, break_on_hyphens=False) or [line]
    return out


def status_text(s: control_pb2.ClusterStatus, width: int | None = None) -> str:
    """``flux status``: the fleet in two lines, the worker table, then pending work by shape."""
    d = status_dict(s)
    fleet, executions, counters = d["fleet"], d["executions"], d["counters"]
    by_transport = ", ".join(f"{n} {t}" for t, n in fleet["connected_by_transport"].items() if n)
    held, offered, free = fleet["reserved"], fleet["allocatable"], fleet["free"]
    pending = sum(d["pending_by_reason"].values())
    requeued = counters["requeued"]
    lines = [
        f"workers     {fleet['connected']} connected" + (f" ({by_transport})" if by_transport else "")
        + (f", {fleet['draining']} draining" if fleet["draining"] else "")
        + (f", {fleet['disconnected']} disconnected" if fleet["disconnected"] else ""),
        f"reserved    {held['cpu']}/{offered['cpu']} cores   {byte_pair(held['memory'], offered['memory'])} memory"
        f"   {held['gpus']}/{offered['gpus']} GPUs   {byte_pair(held['disk'], offered['disk'])} disk"
        f"   {fleet['active_executions']}/{fleet['capacity']} slots",
        f"free        {free['cpu']}/{offered['cpu']} cores   {byte_pair(free['memory'], offered['memory'])} memory"
        f"   {free['gpus']}/{offered['gpus']} GPUs   {byte_pair(free['disk'], offered['disk'])} disk"
        "   (observed, less reservations: what explain counts)",
        f"pending     {pending} ("
        + ", ".join(f"{d['pending_by_reason'][r]} {r.replace('_', ' ')}" for r in REASON_ORDER) + ")",
        f"executions  {executions.get('SCHEDULED', 0)} scheduled, {executions.get('RUNNING', 0)} running; "
        f"{counters['completed']} completed, {counters['failed']} failed, {counters['cancelled']} cancelled "
        f"since the core started {duration((s.now_ms - s.started_at_ms) / 1000)} ago",
        f"activity    {counters['dispatched']} placements, {sum(requeued.values())} requeued ("
        + ", ".join(f"{requeued.get(r, 0)} {r.replace('_', ' ')}" for r in REQUEUE_ORDER)
        + f"), {counters['stream_reconnects']} stream reconnects",
    ]  # fmt: skip
    latency = d["latency_seconds"]
    if any(h["count"] for h in latency.values()):
        lines.append(
            "latency     "
            + "   ".join(
                f"submit->{stage} p50 {_ms(h['p50'])} p99 {_ms(h['p99'])}"
                for stage, h in latency.items()
                if stage != "claimed" and h["count"]
            )
        )
    if s.tenants:
        lines.append(
            "tenants     "
            + "; ".join(f"{t.name} {tenant_usage(t)} ({t.pending} pending)" for t in s.tenants)
            + "   (used/quota)"
        )
    if s.pools:
        lines.append(
            "pools       "
            + ", ".join(
                f"{p.spec.name} {p.workers}/{p.demand_workers} workers ({p.pending} pending)" for p in s.pools
            )
            + "   (connected/demand)"
        )
    lines = _wrapped(lines, width)
    if s.workers:
        lines += ["", workers_text(s.workers, s.now_ms, width)]
    elif s.workers_omitted:
        lines += ["", f"{s.workers_omitted} workers (too many to list here: flux workers list)"]
    if s.pending:
        rows = [
            (
                str(p.count),
                duration(p.oldest_wait_ms / 1000),
                p.oldest_workflow or "-",
                requests_text(p.requests),
                _labels(p.affinity),
                p.reason,
                p.nominated_worker or "-",
                p.summary,
            )
            for p in s.pending
        ]
        lines += [
            "",
            table(
                PENDING_HEADER, rows, right=frozenset({0, 1}), width=width,
                drop=(6, 4, 5, 3), shrink=(7, 2),  # NOMINATED, AFFINITY, REASON, REQUESTS; WHY, WORKFLOW
            ),
        ]  # fmt: skip
        if s.pending_shapes_omitted:
            lines.append(f"... and {s.pending_shapes_omitted} more shapes")
    elif not pending:
        lines += ["", "nothing pending"]
    return "\n".join(lines)


def table(
    header: tuple[str, ...],
    rows: list[tuple[str, ...]],
    right: frozenset[int] = frozenset(),
    width: int | None = None,
    drop: Sequence[int] = (),
    shrink: Sequence[int] = (),
) -> str:
    """Columns two spaces apart; the ``right`` ones (numbers) right-aligned; see ``flux.cli.tables``."""
    return tables.render(header, rows, right, width, drop, shrink)
