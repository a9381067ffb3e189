"""The gateway's one link to the core: a shared ``grpc.aio`` channel and its stubs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from fastapi import Request
from grpc_health.v1 import health_pb2_grpc

from flux.security import Credentials
from flux.v1 import control_pb2_grpc, worker_pb2_grpc
from gateway.observe import tracing

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
    def open(cls, address: str, channel: grpc.aio.Channel | None = None, ca: str | None = None) -> Core:
        """One shared channel to the core (TLS when ``ca`` is given); a given ``channel`` is used as is."""
        owned = channel is None
        if channel is None:
            channel = Credentials(ca=ca).aio_channel(address, options=CHANNEL_OPTIONS)  # type: ignore[arg-type]
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

    def for_caller(self, authorization: str | None) -> Core:
        """The same channel, with the caller's credentials on every call: the core decides, not us.

        Calls made inside ``gateway.observe.tracing.submitting`` also carry the submission's trace context.
        """
        metadata = (("authorization", authorization),) if authorization else ()
        return Core(
            self.address,
            self.channel,
            _WithMetadata(self.workers, metadata),  # type: ignore[arg-type]
            _WithMetadata(self.control, metadata),  # type: ignore[arg-type]
            self.health,
            owned=False,
        )


class _WithMetadata:
    """A stub whose every call also carries ``metadata`` (merged with the call's own)."""

    __slots__ = ("_stub", "_metadata")

    def __init__(self, stub: object, metadata: tuple[tuple[str, str], ...]):
        self._stub, self._metadata = stub, metadata

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._stub, name)
        extra = self._metadata

        def call(request: object, *, metadata: Sequence[tuple[str, str]] = (), **kwargs: Any) -> Any:
            return method(request, metadata=(*extra, *metadata, *tracing.outgoing()), **kwargs)

        return call


async def core(request: Request) -> Core:
    # async: FastAPI runs plain-def dependencies on a thread pool, a hop per request.
    return request.app.state.core.for_caller(request.headers.get("authorization"))
