"""KEDA's external scaler (``externalscaler.ExternalScaler``) over the pools' demand.

A ``ScaledObject`` per pool names the pool in its trigger's metadata
(``scalerMetadata: {pool: a100}``); KEDA then calls, on ``--keda-port``:

- ``GetMetricSpec`` once per ScaledObject: one metric, ``flux-pool-<pool>``,
  with target 1, so the HPA's ``ceil(metric / target)`` is the metric itself;
- ``GetMetrics`` every polling interval: the pool's ``demand_workers`` (busy
  workers plus what its pending work needs, within the pool's min and max);
- ``IsActive`` every polling interval (the ``external`` trigger): whether the
  pool has work at all, which scales it from and back to zero;
- ``StreamIsActive`` (the ``external-push`` trigger): the answer now, then
  each change of it as it happens. The pool book recomputes demand once per
  event-loop turn after any queue or fleet change, so a submission to an idle
  pool is pushed at once, not at the next poll; a slow re-read covers changes
  made on other replicas.

``StreamMetricSpec`` is left unimplemented (UNIMPLEMENTED): the target never
changes, and KEDA falls back to ``GetMetricSpec`` as its proto says.

No bearer token here: KEDA authenticates with a client certificate
(``tlsClientCert``), which the port requires when ``--keda-client-ca`` is set.
The answers are pool names and worker counts only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from flux.dispatcher.core import Dispatcher
from flux.errors import FluxError, InvalidArgument, NotFound, refusal, status_of
from flux.keda import externalscaler_pb2 as pb
from flux.keda import externalscaler_pb2_grpc as pb_grpc
from flux.matching.pools import PoolDemand

log = logging.getLogger("flux.keda")

POOL_KEY = "pool"
METRIC_PREFIX = "flux-pool-"
# Seconds between re-reads on an open StreamIsActive when nothing changed here (another
# replica's submissions reach this one's queue through the shared feed, not its fleet feed).
REFRESH = 5.0


def pool_of(ref: pb.ScaledObjectRef) -> str:
    name = ref.scalerMetadata.get(POOL_KEY, "")
    if not name:
        where = f"ScaledObject {ref.namespace}/{ref.name}" if ref.name else "the ScaledObject"
        raise InvalidArgument(
            f"scalerMetadata.{POOL_KEY} must name a Flux pool (flux pool list), e.g. {POOL_KEY}: a100; "
            f"{where} has none"
        )
    return name


def metric_name(pool: str) -> str:
    return f"{METRIC_PREFIX}{pool}"


class KedaScaler(pb_grpc.ExternalScalerServicer):
    def __init__(self, dispatcher: Dispatcher):
        self.dispatcher = dispatcher

    async def _demand(self, pool: str) -> PoolDemand:
        return await self.dispatcher.pools.get(self.dispatcher, pool)

    async def _fail(self, context: grpc.aio.ServicerContext, exc: Exception) -> None:
        error = refusal(exc, self.dispatcher.store.unavailable)
        if not isinstance(error, InvalidArgument | NotFound):
            log.warning("a KEDA call failed: %s", error)
        await context.abort(status_of(error)[0], str(error))

    async def IsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.IsActiveResponse:
        try:
            return pb.IsActiveResponse(result=(await self._demand(pool_of(request))).active)
        except Exception as exc:
            await self._fail(context, exc)
            raise

    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        try:
            pool = pool_of(request)
            await self._demand(pool)  # an unknown pool is refused here, at setup, not at every poll
            spec = pb.MetricSpec(metricName=metric_name(pool), targetSize=1, targetSizeFloat=1.0)
            return pb.GetMetricSpecResponse(metricSpecs=[spec])
        except Exception as exc:
            await self._fail(context, exc)
            raise

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricsResponse:
        try:
            pool = pool_of(request.scaledObjectRef)
            demand = await self._demand(pool)
            # KEDA asks by the name GetMetricSpec gave (or a prefixed form of it); answer in the name asked.
            name = request.metricName or metric_name(pool)
            value = pb.MetricValue(
                metricName=name, metricValue=demand.desired, metricValueFloat=float(demand.desired)
            )
            return pb.GetMetricsResponse(metricValues=[value])
        except Exception as exc:
            await self._fail(context, exc)
            raise

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.IsActiveResponse]:
        try:
            pool = pool_of(request)
            first = await self._demand(pool)
        except Exception as exc:
            await self._fail(context, exc)
            return
        changes: asyncio.Queue[PoolDemand | None] = asyncio.Queue()

        def on_demand(demand: dict[str, PoolDemand]) -> None:
            changes.put_nowait(demand.get(pool))

        stop = self.dispatcher.pools.watch(on_demand)
        try:
            active = first.active
            yield pb.IsActiveResponse(result=active)
            while True:
                try:
                    current = await asyncio.wait_for(changes.get(), REFRESH)
                except TimeoutError:
                    try:
                        current = await self._demand(pool)
                    except FluxError:
                        current = None  # undeclared and gone: no work for it
                while not changes.empty():  # only the latest of a burst matters
                    current = changes.get_nowait()
                now = current.active if current is not None else False
                if now != active:
                    active = now
                    yield pb.IsActiveResponse(result=active)
        finally:
            stop()


def add_to_server(dispatcher: Dispatcher, server: grpc.aio.Server) -> None:
    pb_grpc.add_ExternalScalerServicer_to_server(KedaScaler(dispatcher), server)  # type: ignore[arg-type]
