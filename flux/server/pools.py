"""``PoolService``: declare pools, and read them with the demand on each."""

from __future__ import annotations

import logging
from typing import TypeVar

import grpc

from flux.dispatcher.core import Dispatcher
from flux.dispatcher.state.tenants import OPERATOR
from flux.errors import InvalidArgument
from flux.server.answers import unary
from flux.server.callers import Callers
from flux.server.pool_convert import pool_to_proto, pools_to_proto, spec_from_proto
from flux.v1 import pools_pb2, pools_pb2_grpc

log = logging.getLogger("flux.server")
R = TypeVar("R")


class PoolService(pools_pb2_grpc.PoolServiceServicer):
    def __init__(self, dispatcher: Dispatcher, callers: Callers | None = None):
        self.dispatcher = dispatcher
        # Who applied pools, for the audit trail (the interceptor already let only a cluster admin in).
        self.callers = callers

    @unary("a pool request")
    async def ApplyPools(self, request: pools_pb2.ApplyPoolsRequest, context: grpc.aio.ServicerContext):
        specs = [spec_from_proto(p, f"pools[{i}]") for i, p in enumerate(request.pools)]
        pools = self.dispatcher.pools
        await pools.apply(specs)
        caller = OPERATOR if self.callers is None else await self.callers.of(context)
        await self.dispatcher.audit.record(
            caller, "pool.apply", ",".join(s.name for s in specs), pools=[s.name for s in specs]
        )
        demand = await pools.demand(self.dispatcher)
        return pools_pb2.ApplyPoolsResponse(pools=[pool_to_proto(demand[s.name]) for s in specs])

    @unary("a pool request")
    async def ListPools(self, request: pools_pb2.ListPoolsRequest, context: grpc.aio.ServicerContext):
        demand = await self.dispatcher.pools.demand(self.dispatcher)
        return pools_pb2.ListPoolsResponse(pools=pools_to_proto(demand.values()))

    @unary("a pool request")
    async def GetPool(self, request: pools_pb2.GetPoolRequest, context: grpc.aio.ServicerContext):
        if not request.name:
            raise InvalidArgument("name must name a pool, e.g. 'a100'")
        found = await self.dispatcher.pools.get(self.dispatcher, request.name)
        return pools_pb2.GetPoolResponse(pool=pool_to_proto(found))
