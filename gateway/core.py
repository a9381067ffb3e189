"""The gateway's one link to the core: a shared ``grpc.aio`` channel and its stubs."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from fastapi import Request
from grpc_health.v1 import health_pb2_grpc

from flux.v1 import control_pb2_grpc, worker_pb2_grpc

CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
]


@dataclass(slots=True)
class Core:
    address: str
    channel: grpc.aio.Channel
    workers: worker_pb2_grpc.WorkerServiceStub
    control: control_pb2_grpc.ControlServiceStub
    health: health_pb2_grpc.HealthStub

    owned: bool = True

    @classmethod
    def open(cls, address: str, channel: grpc.aio.Channel | None = None) -> Core:
        """One shared channel to the core; a given ``channel`` is used as is and left open."""
        owned = channel is None
        if channel is None:
            channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        return cls(
            address,
            channel,
            worker_pb2_grpc.WorkerServiceStub(channel),
            control_pb2_grpc.ControlServiceStub(channel),
            health_pb2_grpc.HealthStub(channel),
            owned,
        )

    async def close(self) -> None:
        if self.owned:
            await self.channel.close()


async def core(request: Request) -> Core:
    # async: FastAPI runs plain-def dependencies on a thread pool, a hop per request.
    return request.app.state.core
