"""``flux status``: the fleet in a few lines, the workers table, pending work by shape, tenants, pools."""

from __future__ import annotations

import textwrap
from typing import Any

from flux.cli.render.common import byte_pair, duration, labels_text, requests_text, table
from flux.cli.render.executions import state_name
from flux.cli.render.workers import worker_dict, workers_text
from flux.domain.quantity import format_bytes
from flux.v1 import control_pb2

REASON_ORDER = ("busy", "infeasible", "no_worker")
REQUEUE_ORDER = ("released", "worker_lost", "ack_deadline", "stream_overflowed", "preempted")
TENANT_RESOURCES = ("cpu", "memory", "gpu", "gpu_memory", "executions")


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
        elif resource == "executions":
            parts.append(f"{used}/{t.quota.executions if limited else '-'} executions")
        else:
            what = "memory" if resource == "memory" else "VRAM"
            pair = byte_pair(used, getattr(t.quota, resource)) if limited else f"{format_bytes(used)}/-"
            parts.append(f"{pair} {what}")
    return ", ".join(parts) or "nothing held"


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
        "placement": s.placement or "spread",
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
    lines.append(
        f"placement   {d['placement']} ("
        + (
            "fullest capable worker first"
            if d["placement"] == "binpack"
            else "least loaded capable worker first"
        )
        + ", unless a workflow names its own)"
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
                labels_text(p.affinity),
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
