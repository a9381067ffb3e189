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
  each change of it as it happens. The pool book recomputes demand at most
  once per 10 ms after any queue or fleet change, for all streams together,
  and wakes only the streams whose pool's answer flipped, so a submission to
  an idle pool is pushed at once and an open stream costs nothing while its
  answer holds; the book's one slow refresh covers changes made on other
  replicas.

``StreamMetricSpec`` is left unimplemented (UNIMPLEMENTED): the target never
changes, and KEDA falls back to ``GetMetricSpec`` as its proto says.

No bearer token here: KEDA authenticates with a client certificate
(``tlsClientCert``), which the port requires when ``--keda-client-ca`` is set;
beyond loopback the server refuses to start without it unless
``--keda-insecure`` says so. The answers are pool names and worker counts
only, and what a caller without a certificate can cost is bounded (issue 40):

- open ``StreamIsActive`` streams are capped per peer host and in all
  (``--keda-max-streams-per-peer``, ``--keda-max-streams``; RESOURCE_EXHAUSTED
  names the cap and its flag);
- an unknown pool is refused from the pool book's memory: no demand
  computation and no store read of its own (the declarations come from the
  book's shared re-read, at most one per 2 s), and NOT_FOUND names only the
  pool asked for, never the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from flux.dispatcher.core import Dispatcher
from flux.errors import InvalidArgument, NotFound, ResourceExhausted, refusal, status_of
from flux.keda import externalscaler_pb2 as pb
from flux.keda import externalscaler_pb2_grpc as pb_grpc
from flux.matching.pools import PoolDemand
from flux.server.keda_streams import StreamLimits

log = logging.getLogger("flux.keda")

POOL_KEY = "pool"
METRIC_PREFIX = "flux-pool-"


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
    def __init__(self, dispatcher: Dispatcher, limits: StreamLimits | None = None):
        self.dispatcher = dispatcher
        self.limits = limits if limits is not None else StreamLimits()

    async def _demand(self, pool: str) -> PoolDemand:
        return await self.dispatcher.pools.get(self.dispatcher, pool)

    async def _fail(self, context: grpc.aio.ServicerContext, exc: Exception) -> None:
        error = refusal(exc, self.dispatcher.store.unavailable)
        # A caller's mistake or a cap it hit is its own to read in the answer, not a line per call here.
        if not isinstance(error, InvalidArgument | NotFound | ResourceExhausted):
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
            # An unknown pool is refused here, at setup, not at every poll; a known one needs no demand.
            await self.dispatcher.pools.refresh()
            self.dispatcher.pools.require(pool)
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
        # Counted before anything else: a refused stream costs a dictionary lookup.
        try:
            release = self.limits.admit(context.peer())
        except Exception as exc:
            await self._fail(context, exc)
            return
        stop = None
        try:
            # Only the latest flip matters; the pool book calls this once per flip, never per change.
            flipped: asyncio.Queue[bool] = asyncio.Queue()
            try:
                active, stop = await self.dispatcher.pools.subscribe(pool_of(request), flipped.put_nowait)
            except Exception as exc:
                await self._fail(context, exc)
                return
            yield pb.IsActiveResponse(result=active)
            while True:
                now = await flipped.get()
                while not flipped.empty():  # a burst of flips while this stream was not scheduled
                    now = flipped.get_nowait()
                if now != active:
                    active = now
                    yield pb.IsActiveResponse(result=active)
        finally:
            if stop is not None:
                stop()
            release()


def add_to_server(
    dispatcher: Dispatcher, server: grpc.aio.Server, limits: StreamLimits | None = None
) -> None:
    pb_grpc.add_ExternalScalerServicer_to_server(KedaScaler(dispatcher, limits), server)  # type: ignore[arg-type]
