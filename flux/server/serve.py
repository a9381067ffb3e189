"""Build and run the control plane: store, dispatcher, gRPC server with health and reflection."""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from flux import defaults
from flux.dispatcher.core import Dispatcher, Settings
from flux.dispatcher.state.freezing import freeze, unwatch, watch
from flux.observe import logs, pauses
from flux.security import AuthInterceptor, Tokens, is_loopback, plaintext_warning
from flux.server.admin_services import add_admin_services, admin_service_names
from flux.server.callers import Callers
from flux.server.control_service import ControlService
from flux.server.interceptors import DecodeGuard
from flux.server.introspection import Health, enable_reflection
from flux.server.local import LocalChannel, LocalRegistry
from flux.server.worker_service import WorkerService
from flux.v1 import control_pb2, control_pb2_grpc, worker_pb2, worker_pb2_grpc

if TYPE_CHECKING:
    from gateway import HttpLimits

log = logging.getLogger("flux.server")

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_DB = Path(".flux") / "flux.db"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = defaults.HOST
    grpc_port: int = defaults.GRPC_PORT
    db: str = str(DEFAULT_DB)
    dispatcher: Settings = field(default_factory=Settings)
    # The HTTP/SSE gateway beside the core, on the same host; None runs gRPC only.
    http_port: int | None = defaults.HTTP_PORT
    # Worker and client tokens; None turns authentication off (--insecure, loopback only).
    tokens: Tokens | None = None
    # (certificate, key) PEM paths: gRPC and the gateway then speak TLS only.
    tls: tuple[str, str] | None = None
    # Origins whose pages may call the gateway (--cors-origin).
    cors_origins: tuple[str, ...] = ()
    # Host names the gateway answers to besides its bound ones (--allowed-host): checked without
    # auth (--insecure), and whenever any is given.
    allowed_hosts: tuple[str, ...] = ()
    # What one HTTP connection may cost; None keeps the gateway's defaults.
    http_limits: HttpLimits | None = None
    # KEDA's external scaler on its own port (same host, same TLS certificate); None: not served.
    keda_port: int | None = None
    # CA (PEM) whose client certificates the KEDA port requires (KEDA's tlsClientCert); needs tls.
    keda_client_ca: str | None = None
    # The token Prometheus presents to see per-tenant series on /metrics and GetMetrics
    # (--metrics-token-file); "" lets only a cluster-admin API token see them.
    metrics_token: str = ""
    # Serve the KEDA port beyond loopback without client certificates (--keda-insecure).
    keda_insecure: bool = False
    # Open StreamIsActive streams, in all and per peer host, before new ones get RESOURCE_EXHAUSTED.
    keda_max_streams: int = defaults.KEDA_MAX_STREAMS
    keda_max_streams_per_peer: int = defaults.KEDA_MAX_STREAMS_PER_PEER


def keda_refusal(config: ServerConfig) -> str:
    """Why this configuration of the KEDA port is refused, or "" when it is not.

    The port has no bearer token: beyond loopback, anyone who reaches it may call it unless it
    requires a client certificate. Serving it so anyway is a choice said out loud (--keda-insecure),
    e.g. where a NetworkPolicy alone admits KEDA's namespace.
    """
    if config.keda_client_ca and config.keda_insecure:
        return "--keda-client-ca and --keda-insecure contradict each other: give one of them"
    if config.keda_client_ca and config.tls is None:
        return "--keda-client-ca needs --tls-cert and --tls-key: client certificates need TLS"
    if config.keda_port is None or config.keda_client_ca or config.keda_insecure or is_loopback(config.host):
        return ""
    return (
        f"--keda-port on {config.host or 'every address'} would answer anyone who reaches it: give "
        "--keda-client-ca CA.pem (with --tls-cert/--tls-key) so only KEDA's client certificate is "
        "accepted, or --keda-insecure to serve it without one (e.g. behind a NetworkPolicy)"
    )


DB_ENV = "FLUX_DB_URL"


def resolve_db(flag: str | None, file: str | None, environ: Mapping[str, str]) -> str:
    """Where the state lives: ``--db``, then ``--db-file``, then ``$FLUX_DB_URL``, then SQLite under ./.flux/.

    A PostgreSQL URL carries its password; on the command line every local user reads it in
    /proc/<pid>/cmdline, so the file (a mounted Secret) and the environment are the forms to use.
    """
    if flag:
        return flag
    if file:
        try:
            url = Path(file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"--db-file {file!r} cannot be read: {exc.strerror or exc}") from None
        if not url.strip():
            raise ValueError(
                f"--db-file {file!r} is empty: it holds the database URL (postgresql://… or a SQLite path)"
            )
        return url
    return environ.get(DB_ENV) or str(DEFAULT_DB)


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def build_dispatcher(config: ServerConfig) -> Dispatcher:
    """SQLite: one server owns everything. PostgreSQL: one replica among several on one database."""
    settings = config.dispatcher
    if not settings.server_id:
        settings = replace(settings, server_id=uuid.uuid4().hex[:12])
    if is_postgres(config.db):
        from flux.dispatcher.modes.shared.replica import shared
        from flux.store import PostgresStore

        store = PostgresStore(config.db, settings.server_id)
        return Dispatcher(store, settings, modes=shared(store))
    from flux.store import SqliteStore

    return Dispatcher(SqliteStore(config.db.removeprefix("sqlite:///").removeprefix("sqlite://")), settings)


@dataclass(slots=True)
class RunningServer:
    server: grpc.aio.Server
    dispatcher: Dispatcher
    port: int
    health: health.aio.HealthServicer
    # The same servicers, reachable in-process (for the gateway that runs beside the core).
    local: LocalRegistry
    # KEDA's external scaler (``--keda-port``) and its bound port, when served.
    keda: grpc.aio.Server | None = None
    keda_port: int = 0

    def local_channel(self) -> LocalChannel:
        return self.local.channel()

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        if self.keda is not None:
            await self.keda.stop(grace)
        await self.server.stop(grace)
        await self.dispatcher.stop()


def grpc_port_in_use(config: ServerConfig) -> str:
    """The error for a gRPC port that cannot be bound, naming the flags that pick another."""
    return (
        f"the gRPC port {config.grpc_port} on {config.host} is already in use or cannot be bound "
        "(is another flux server running?); pick another with --grpc-port PORT "
        '(make run FLUX_ARGS="--grpc-port 50061"), and give workers --server HOST:PORT '
        "and clients FLUX_SERVER"
    )


def port_taken(host: str, port: int) -> bool:
    """Whether every address ``host`` resolves to has ``port`` bound by a listener already.

    Only a diagnosis, asked before grpc binds: grpc's C core logs a raw ``add_port.cc`` line
    to stderr for a busy port before it returns, which a newcomer reads as a crash. The real
    bind is still grpc's; were the port taken between this check and it, that bind fails as
    before (with the raw line) and the same clean error follows, so no race is introduced.
    SO_REUSEADDR as grpc sets it: a port in TIME_WAIT is free, a live listener is not.
    """
    if port == 0:
        return False
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False  # grpc says what is wrong with the host
    busy = 0
    for family, kind, proto, _, address in addresses:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as exc:
            busy += exc.errno == errno.EADDRINUSE
    return busy == len(addresses) > 0


async def start_server(config: ServerConfig) -> RunningServer:
    # Refused before the store is opened, so a refused start leaves no database behind.
    if config.tokens is None and not is_loopback(config.host):
        raise ValueError(
            f"--insecure is refused on {config.host}: without auth the server binds to loopback only"
        )
    if refused := keda_refusal(config):
        raise ValueError(refused)
    if port_taken(config.host, config.grpc_port):
        raise OSError(grpc_port_in_use(config))
    dispatcher = build_dispatcher(config)
    await dispatcher.start()
    callers = Callers(config.tokens, dispatcher.tenants)
    # Also applied to in-process calls (the gateway beside the core), so both paths pass the same checks.
    interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (
        *((AuthInterceptor(config.tokens, callers),) if config.tokens is not None else ()),
        DecodeGuard(),
    )
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # Find dead worker streams even when nothing is being dispatched.
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
            ("grpc.keepalive_permit_without_calls", 1),
            # grpc sets SO_REUSEPORT by default: a second server on a busy port would bind beside
            # the first and share its traffic. Off, a busy port fails the start instead.
            ("grpc.so_reuseport", 0),
        ],
    )
    workers, control, health_servicer = (
        WorkerService(dispatcher, callers),
        ControlService(dispatcher, callers, metrics_token=config.metrics_token),
        Health(),
    )
    local = LocalRegistry(interceptors)
    for target in (server, local):
        worker_pb2_grpc.add_WorkerServiceServicer_to_server(workers, target)  # type: ignore[arg-type]
        control_pb2_grpc.add_ControlServiceServicer_to_server(control, target)  # type: ignore[arg-type]
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, target)  # type: ignore[arg-type]
        add_admin_services(dispatcher, callers, target)
    services = (
        worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
        control_pb2.DESCRIPTOR.services_by_name["ControlService"].full_name,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        *admin_service_names(),
    )
    enable_reflection(services, server)
    address = f"{config.host}:{config.grpc_port}"
    try:
        if config.tls is not None:
            cert, key = (Path(p).read_bytes() for p in config.tls)
            port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:  # what grpc raises for a port it cannot bind (not OSError)
        port = 0
    if port == 0:
        await dispatcher.stop()
        raise OSError(grpc_port_in_use(config))
    await server.start()
    await dispatcher.serving(f"{config.host}:{port}")
    for name in ("", *services[:2]):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    running = RunningServer(server, dispatcher, port, health_servicer, local)
    if config.keda_port is not None:
        try:
            running.keda, running.keda_port = await _start_keda(config, dispatcher, health_servicer)
        except BaseException:
            await running.stop(0)
            raise
    return running


async def _start_keda(
    config: ServerConfig, dispatcher: Dispatcher, health_servicer: health.aio.HealthServicer
) -> tuple[grpc.aio.Server, int]:
    """KEDA's external scaler on its own port, with the health service for its probes."""
    from flux.server.keda import add_to_server
    from flux.server.keda_streams import StreamLimits

    assert config.keda_port is not None
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    add_to_server(dispatcher, server, StreamLimits(config.keda_max_streams, config.keda_max_streams_per_peer))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)  # type: ignore[arg-type]
    address = f"{config.host}:{config.keda_port}"
    try:
        if config.tls is not None:
            cert, key = (Path(p).read_bytes() for p in config.tls)
            ca = Path(config.keda_client_ca).read_bytes() if config.keda_client_ca else None
            credentials = grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
            )
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(
            f"the KEDA port {config.keda_port} on {config.host} is already in use or cannot be bound"
        )
    await server.start()
    return server, port


def loopback_for(host: str) -> str:
    """The address a local client dials to reach a server bound to ``host``."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


async def serve(config: ServerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    running = await start_server(config)
    if config.tls is None and (warning := plaintext_warning(config.host)):
        log.warning(warning)
    # Tests and scripts read the bound ports from these lines (port 0 picks one).
    db = config.db
    if is_postgres(db):
        from flux.store.postgres import redacted

        db = redacted(db)
    gateway = None
    probe = pauses.from_environment()
    try:
        if config.http_port is not None:
            from gateway import GatewaySettings, start_gateway

            host = loopback_for(config.host)
            core = f"[{host}]:{running.port}" if ":" in host else f"{host}:{running.port}"
            from gateway import allowed_hosts

            insecure = config.tokens is None
            settings = GatewaySettings(
                core=core, ping_interval=config.dispatcher.ping_interval, cors_origins=config.cors_origins,
                insecure=insecure,
                allowed_hosts=allowed_hosts(config.host, is_loopback(config.host), config.allowed_hosts)
                if insecure or config.allowed_hosts else (),
            )  # fmt: skip
            try:
                gateway = await start_gateway(
                    settings, config.host, config.http_port, channel=running.local_channel(), tls=config.tls,
                    limits=config.http_limits,
                )  # fmt: skip
            except OSError as exc:
                raise OSError(
                    f"{exc}; pick another with --http-port PORT "
                    '(make run FLUX_ARGS="--http-port 8081"), or run without the gateway with --no-http'
                ) from None
        # Only once every port is bound, so no line says "listening" for a server that then exits;
        # the gRPC line first, as scripts and tests read them in that order.
        logs.emit(
            f"flux server listening on {config.host}:{running.port} (grpc), db {db}",
            logger=log.name, grpc=f"{config.host}:{running.port}", db=db,
        )  # fmt: skip
        if gateway is not None:
            logs.emit(f"flux gateway listening on {gateway.url}", logger=log.name, http=gateway.url)
        if running.keda is not None:
            keda = f"{config.host}:{running.keda_port}"
            logs.emit(f"flux keda scaler listening on {keda} (keda)", logger=log.name, keda=keda)
        # What start-up built lives as long as the server: out of every full collection from now on.
        freeze("started")
        watch(running.dispatcher.freezer)
        if probe is not None:
            probe.start()
        await stop.wait()
        log.info("shutting down")
    finally:
        unwatch(running.dispatcher.freezer)
        if probe is not None:
            await probe.stop()
        # Gateway first: its SSE streams end and cancel their core streams before the core stops.
        if gateway is not None:
            await gateway.stop()
        await running.stop()
