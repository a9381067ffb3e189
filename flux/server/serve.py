"""Build and run the control plane: store, dispatcher, gRPC server with health and reflection."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from flux.dispatcher.core import Dispatcher, Settings
from flux.server.servicers import ControlService, WorkerService
from flux.store.base import Store
from flux.v1 import control_pb2, control_pb2_grpc, worker_pb2, worker_pb2_grpc

log = logging.getLogger("flux.server")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_DB = Path(".flux") / "flux.db"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    grpc_port: int = 50051
    db: str = str(DEFAULT_DB)
    dispatcher: Settings = field(default_factory=Settings)


def open_store(url: str) -> Store:
    if url.startswith(("postgresql://", "postgres://")):
        raise ValueError(
            "--db postgresql://… is not supported yet; use a SQLite path (the default is ./.flux/flux.db)"
        )
    path = url.removeprefix("sqlite:///").removeprefix("sqlite://")
    from flux.store.sqlite import SqliteStore

    return SqliteStore(path)


@dataclass(slots=True)
class RunningServer:
    server: grpc.aio.Server
    dispatcher: Dispatcher
    port: int
    health: health.aio.HealthServicer

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        await self.dispatcher.stop()


async def start_server(config: ServerConfig) -> RunningServer:
    dispatcher = Dispatcher(open_store(config.db), config.dispatcher)
    await dispatcher.start()
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # Find dead worker streams even when nothing is being dispatched.
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
    )
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(WorkerService(dispatcher), server)
    control_pb2_grpc.add_ControlServiceServicer_to_server(ControlService(dispatcher), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    services = (
        worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
        control_pb2.DESCRIPTOR.services_by_name["ControlService"].full_name,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        reflection.SERVICE_NAME,
    )
    reflection.enable_server_reflection(services, server)
    port = server.add_insecure_port(f"{config.host}:{config.grpc_port}")
    if port == 0:
        await dispatcher.stop()
        raise OSError(f"could not bind gRPC to {config.host}:{config.grpc_port}")
    await server.start()
    for name in ("", *services[:2]):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, dispatcher, port, health_servicer)


async def serve(config: ServerConfig) -> None:
    running = await start_server(config)
    # Tests and scripts read the bound port from this line (port 0 picks one).
    print(f"flux server listening on {config.host}:{running.port} (grpc), db {config.db}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("shutting down")
    await running.stop()
