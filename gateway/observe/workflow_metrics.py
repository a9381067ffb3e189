"""``GET /metrics``' families of dependencies, flow-control limits and schedules (``metrics.py``
renders them with the rest of one ``ClusterStatus``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from flux.v1 import control_pb2


def dependency_metrics(s: control_pb2.ClusterStatus) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "flux_dependencies_waiting",
        "Executions held out of the queue until their dependencies end (client.run(after=...)).",
        value=s.dependencies_waiting,
    )
    yield CounterMetricFamily(
        "flux_dependencies_released",
        "Dependents released: their last dependency ended as their when asked.",
        value=s.counters.dependencies_released,
    )
    yield CounterMetricFamily(
        "flux_dependencies_cancelled",
        "Dependents ended CANCELLED, reason dependency: a dependency ended against their when.",
        value=s.counters.dependencies_cancelled,
    )


def limit_metrics(s: control_pb2.ClusterStatus) -> Iterator[Metric]:
    """Per flow-control limit, never per key: keys come from inputs and are unbounded."""
    in_use = GaugeMetricFamily(
        "flux_limit_in_use",
        "Executions holding a slot or token of each limit, over its keys.",
        labels=["limit"],
    )
    waiting = GaugeMetricFamily("flux_limit_waiting", "Executions waiting on each limit.", labels=["limit"])
    limited = CounterMetricFamily(
        "flux_rate_limited", "Times an execution waited for a token of each limit.", labels=["limit"]
    )
    for row in s.limits:
        in_use.add_metric([row.limit], row.in_use)
        waiting.add_metric([row.limit], row.waiting)
        limited.add_metric([row.limit], row.rate_limited)
    yield in_use
    yield waiting
    yield limited


def schedule_metrics(s: control_pb2.ClusterStatus) -> Iterator[Metric]:
    """Schedules' ticks by what became of them on this server, and schedules by state (no names:
    a tenant's schedule names are its own)."""
    ticks = CounterMetricFamily(
        "flux_schedule_ticks",
        "Schedule ticks since the server started, by result: fired, skipped, queued, missed, manual, refused.",
        labels=["result"],
    )
    for result in ("fired", "skipped", "queued", "missed", "manual", "refused"):
        ticks.add_metric([result], s.schedule_ticks.get(result, 0))
    schedules = GaugeMetricFamily("flux_schedules", "Schedules, by state.", labels=["state"])
    schedules.add_metric(["active"], s.schedules_active)
    schedules.add_metric(["paused"], s.schedules_paused)
    yield ticks
    yield schedules
