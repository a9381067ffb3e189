"""``GET /metrics``: the core's numbers in the Prometheus text format.

The gateway may run beside the core or in another process, and it holds no
dispatch state, so every scrape asks the core (``ControlService.GetMetrics``)
and renders that one answer through a custom collector: no global registry is
updated per request, and two gateways in front of one core report the same.

No token is needed, as for ``/healthz`` and as Prometheus scrapes by default:
without one ``GetMetrics`` answers only aggregates with bounded labels (transport,
reason, state, stage, resource), never a tenant, worker, workflow or execution
name, an address or a token. The per-tenant series (``flux_tenant_*``, refusals by
tenant) are for a scraper that presents the server's metrics token
(``--metrics-token-file``) or a cluster-admin API token as ``Authorization: Bearer``:
the gateway passes the header on and the core decides, so a gateway holds no token
of its own (``flux start gateway`` needs no flag for it). The core may answer with
per-shape explanations up to a second old, so scraping in a loop cannot make it
redo them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from flux.v1 import control_pb2
from gateway.observe.workflow_metrics import dependency_metrics, limit_metrics, schedule_metrics
from gateway.wire import schema

router = APIRouter(tags=["ops"])

STATES = {
    control_pb2.EXECUTION_STATE_CREATED: "created",
    control_pb2.EXECUTION_STATE_SCHEDULED: "scheduled",
    control_pb2.EXECUTION_STATE_RUNNING: "running",
    control_pb2.EXECUTION_STATE_COMPLETED: "completed",
    control_pb2.EXECUTION_STATE_FAILED: "failed",
    control_pb2.EXECUTION_STATE_CANCELLED: "cancelled",
}
# Label values of flux_reservations and flux_allocatable; the unit is in the value.
TENANT_RESOURCES = ("cpu", "memory", "gpu", "gpu_memory", "executions")
RESOURCES = (("cpu_cores", "cpu"), ("memory_bytes", "memory"), ("disk_bytes", "disk"), ("gpus", "gpus"))


class StatusCollector(Collector):
    """Metric families of one ``ClusterStatus``; label values come from fixed sets, and pool names."""

    def __init__(self, status: control_pb2.ClusterStatus):
        self.status = status

    def collect(self) -> Iterator[Metric]:
        s = self.status
        fleet, counters = s.fleet, s.counters

        workers = GaugeMetricFamily(
            "flux_workers_connected",
            "Workers with a live dispatch stream, by transport.",
            labels=["transport"],
        )
        for transport, count in sorted(fleet.connected_by_transport.items()):
            workers.add_metric([transport], count)
        yield workers
        yield GaugeMetricFamily(
            "flux_workers_disconnected",
            "Known workers without a live stream, waiting out their grace period.",
            value=fleet.disconnected,
        )

        yield _by_reason(
            GaugeMetricFamily,
            "flux_pending_executions",
            "CREATED executions by why they wait, as `flux execution explain` says: busy (a connected "
            "worker could run it once others finish), infeasible (no connected worker ever could), "
            "no_worker (no worker connected and accepting work).",
            s.pending_by_reason,
        )

        executions = GaugeMetricFamily(
            "flux_executions",
            "Executions by state: created, scheduled and running now; completed, failed and "
            "cancelled since the core started.",
            labels=["state"],
        )
        for entry in s.executions:
            if entry.state in STATES:
                executions.add_metric([STATES[entry.state]], entry.count)
        yield executions

        yield CounterMetricFamily(
            "flux_executions_submitted", "Executions accepted by RunWorkflow.", value=counters.submitted
        )
        yield CounterMetricFamily(
            "flux_placements",
            "Dispatches of an execution to a worker (re-dispatches after a requeue included); "
            "rate(flux_placements_total[1m]) gives placements per second.",
            value=counters.dispatched,
        )
        yield CounterMetricFamily(
            "flux_claims", "Claims accepted: executions started.", value=counters.claimed
        )
        finished = CounterMetricFamily(
            "flux_executions_finished", "Executions that reached a final state, by state.", labels=["state"]
        )
        for state, count in (
            ("completed", counters.completed),
            ("failed", counters.failed),
            ("cancelled", counters.cancelled),
        ):
            finished.add_metric([state], count)
        yield finished
        yield _by_reason(
            CounterMetricFamily,
            "flux_requeues",
            "Executions sent back to CREATED, by reason: released (by their worker), worker_lost "
            "(grace period over), ack_deadline (dispatch not claimed in time), stream_overflowed "
            "(unclaimed on a stream cut for falling behind), preempted (stopped so a tenant could "
            "reclaim its quota), retry (an attempt failed and its policy tries again), moved (taken "
            "from a busy worker's own queue for a worker with free room).",
            counters.requeued,
        )
        yield _by_reason(
            CounterMetricFamily,
            "flux_preemptions",
            "Executions preempted, by reason: reclaim (a tenant under its nominal quota took back what "
            "its cohort had borrowed).",
            counters.preempted,
        )
        yield _by_reason(
            CounterMetricFamily,
            "flux_preemptions_refused",
            "Preemptions that would have made room but were held back, by reason: budget (the "
            "tenant's --preemption-budget of executions a minute was spent).",
            counters.preemptions_refused,
        )
        yield _by_reason(
            CounterMetricFamily,
            "flux_retries",
            "Attempts that ended and were tried again, by why the attempt ended: error (the body "
            "raised, retried under its retry policy), timeout, heartbeat_timeout, worker_lost.",
            counters.retries,
        )
        yield _by_kind(
            "flux_timeouts",
            "Timeouts that fired, by kind: timeout (an attempt ran past its timeout), "
            "heartbeat_timeout (an attempt went silent), pending_timeout (never started within its "
            "pending timeout, or infeasible for --infeasible-after).",
            counters.timeouts,
        )
        yield CounterMetricFamily(
            "flux_ack_deadline_expiries",
            "Dispatches not claimed within the ack deadline.",
            value=counters.ack_deadline_expiries,
        )
        yield CounterMetricFamily(
            "flux_stream_reconnects",
            "Dispatch streams reopened by a worker registration that had one before.",
            value=counters.stream_reconnects,
        )
        worker_messages = CounterMetricFamily(
            "flux_worker_messages",
            "Messages between the server and its workers, by direction: sent (dispatch stream events, "
            "answers on WorkerCalls streams and to the worker service's calls), received (their calls).",
            labels=["direction"],
        )
        worker_messages.add_metric(["sent"], counters.worker_messages_sent)
        worker_messages.add_metric(["received"], counters.worker_messages_received)
        yield worker_messages
        yield CounterMetricFamily(
            "flux_queued_dispatches",
            "Dispatches queued ahead at a pipelining worker (--prefetch); counted in placements too.",
            value=counters.queued_dispatches,
        )

        latency = HistogramMetricFamily(
            "flux_dispatch_latency_seconds",
            "Seconds from submission to each stage: dispatched (pushed to a worker), claimed (claim "
            "accepted), started (the body starts; the worker starts it right after its claim is "
            "accepted, so it is timed at the accepted claim).",
            labels=["stage"],
        )
        for histogram in s.latencies:
            # A bucket's exemplar links it to the trace of an execution observed in it
            # (README "Tracing"); only the OpenMetrics exposition shows them.
            exemplars = {
                e.bucket: Exemplar({"trace_id": e.trace_id}, e.value, e.timestamp_ms / 1000)
                for e in histogram.exemplars
            }
            cumulative, buckets = 0, []
            for index, (bound, count) in enumerate(zip(histogram.bounds, histogram.counts, strict=False)):
                cumulative += count
                buckets.append(_bucket(floatToGoString(bound), cumulative, exemplars.get(index)))
            buckets.append(_bucket("+Inf", histogram.count, exemplars.get(len(histogram.bounds))))
            latency.add_metric([histogram.stage], buckets, histogram.sum)
        yield latency

        reservations = GaugeMetricFamily(
            "flux_reservations",
            "Resources held by dispatched and running executions, over all known workers.",
            labels=["resource"],
        )
        allocatable = GaugeMetricFamily(
            "flux_allocatable", "Resources the connected workers advertise.", labels=["resource"]
        )
        for label, field in RESOURCES:
            reservations.add_metric([label], getattr(fleet.reserved, field))
            allocatable.add_metric([label], getattr(fleet.allocatable, field))
        yield reservations
        yield allocatable
        yield from _pool_metrics(s)
        yield from _tenant_metrics(s)
        yield from limit_metrics(s)
        yield from dependency_metrics(s)
        yield from schedule_metrics(s)
        yield GaugeMetricFamily(
            "flux_start_time_seconds",
            "When the core started, in seconds since the Unix epoch; counters count from then.",
            value=s.started_at_ms / 1000,
        )


def _by_kind(name: str, help_text: str, counts: Mapping[str, int]) -> Metric:
    """A counter labelled by ``kind``, a sample per kind in name order."""
    metric = CounterMetricFamily(name, help_text, labels=["kind"])
    for kind, count in sorted(counts.items()):
        metric.add_metric([kind], count)
    return metric


def _by_reason(
    family: type[GaugeMetricFamily] | type[CounterMetricFamily],
    name: str,
    help_text: str,
    counts: Mapping[str, int],
) -> Metric:
    """One family labelled by ``reason``, a sample per reason in name order."""
    metric = family(name, help_text, labels=["reason"])
    for reason, count in sorted(counts.items()):
        metric.add_metric([reason], count)
    return metric


def _tenant_metrics(s: control_pb2.ClusterStatus) -> Iterator[Metric]:
    """Per tenant, while any tenant has terms, for a scraper with the metrics token (the core leaves
    ``tenants`` empty otherwise); the label values are tenant names, which only a cluster admin
    sets (flux tenant create), and the quota resources."""
    usage = GaugeMetricFamily(
        "flux_tenant_usage",
        "What each tenant's scheduled and running executions hold, by resource "
        "(cpu in cores, memory and gpu_memory in bytes, gpu in devices, executions in executions "
        "scheduled or running: each counts one, whatever it requests).",
        labels=["tenant", "resource"],
    )
    quota = GaugeMetricFamily(
        "flux_tenant_quota",
        "Each tenant's nominal quota, by resource (absent: unlimited).",
        labels=["tenant", "resource"],
    )
    pending = GaugeMetricFamily(
        "flux_tenant_pending", "Pending executions of each tenant.", labels=["tenant"]
    )
    refused = CounterMetricFamily(
        "flux_tenant_preemptions_refused",
        "Each tenant's preemptions held back, by reason (budget: its --preemption-budget was spent).",
        labels=["tenant", "reason"],
    )
    for tenant in s.tenants:
        for resource in TENANT_RESOURCES:
            usage.add_metric([tenant.name, resource], getattr(tenant.usage, resource))
            if tenant.quota.HasField(resource):
                quota.add_metric([tenant.name, resource], getattr(tenant.quota, resource))
        pending.add_metric([tenant.name], tenant.pending)
        for reason, count in sorted(tenant.preemptions_refused.items()):
            refused.add_metric([tenant.name, reason], count)
    yield usage
    yield quota
    yield pending
    yield refused


def _pool_metrics(s: control_pb2.ClusterStatus) -> Iterator[Metric]:
    """Per worker pool; the label values are pool names, which only an operator or a worker's
    --pool sets (a declaration or a registered worker, both authenticated)."""
    demand = GaugeMetricFamily(
        "flux_pool_demand_workers",
        "Workers each pool should have for its work: busy workers plus what its pending executions "
        "need, within the pool's min and max (what KEDA scales the pool's Deployment to).",
        labels=["pool"],
    )
    workers = GaugeMetricFamily("flux_pool_workers", "Connected workers of each pool.", labels=["pool"])
    pending = GaugeMetricFamily(
        "flux_pool_pending",
        "Pending executions counted in each pool: the one the matcher would choose first.",
        labels=["pool"],
    )
    for pool in s.pools:
        demand.add_metric([pool.spec.name], pool.demand_workers)
        workers.add_metric([pool.spec.name], pool.workers)
        pending.add_metric([pool.spec.name], pool.pending)
    yield demand
    yield workers
    yield pending


def _bucket(bound: str, value: int, exemplar: Exemplar | None) -> tuple:  # type: ignore[type-arg]
    return (bound, value) if exemplar is None else (bound, value, exemplar)


def render(status: control_pb2.ClusterStatus, openmetrics: bool = False) -> bytes:
    """The Prometheus text format, or with ``openmetrics`` the OpenMetrics one (with exemplars)."""
    registry = CollectorRegistry(auto_describe=False)  # this answer's only; never the global one
    registry.register(StatusCollector(status))
    return generate_openmetrics(registry) if openmetrics else generate_latest(registry)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {CONTENT_TYPE_LATEST: {}, OPENMETRICS_CONTENT_TYPE: {}},
            "description": "Prometheus text format 0.0.4; OpenMetrics 1.0 (with trace exemplars) "
            "when the scraper's Accept asks for application/openmetrics-text",
        },
        401: {"model": schema.ErrorBody},
        503: {"model": schema.ErrorBody},
    },
)
async def metrics(request: Request) -> Response:
    """The core's counters, gauges and latency histograms for Prometheus; no token needed.

    Tenants' series (`flux_tenant_usage`, `flux_tenant_quota`, `flux_tenant_pending`,
    `flux_tenant_preemptions_refused_total`) only for `Authorization: Bearer` with the server's
    metrics token (`--metrics-token-file`) or a cluster-admin API token; a token that is neither
    is answered 401.

    A scraper that accepts `application/openmetrics-text` (Prometheus does, with exemplar
    storage on) gets OpenMetrics, whose latency buckets carry exemplars with trace ids.
    """
    # The scraper's own Authorization, if any: with the metrics token the core adds tenants' series.
    core = request.app.state.core.for_caller(request.headers.get("authorization"))
    status = await core.control.GetMetrics(
        control_pb2.GetMetricsRequest(), timeout=request.app.state.settings.unary_timeout
    )
    if "application/openmetrics-text" in request.headers.get("accept", ""):
        return Response(render(status, openmetrics=True), media_type=OPENMETRICS_CONTENT_TYPE)
    return Response(render(status), media_type=CONTENT_TYPE_LATEST)
