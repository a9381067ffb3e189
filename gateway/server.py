"""Run the gateway with uvicorn inside an event loop someone else owns (the CLI's).

``flux start server`` runs it beside the gRPC core on the same loop, ``flux
start gateway`` alone; either way the caller owns the signals, so uvicorn's
own signal capture is switched off and ``stop`` is the only way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import uvicorn
from sse_starlette.sse import AppStatus

from flux import defaults
from flux.observe import logs
from gateway.app import GatewaySettings, create_app
from gateway.security import (
    BACKLOG,
    HttpLimits,
    bind,
    fit_to_open_files,
    guarded_protocol,
    quiet_accept_failures,
    raise_open_files_limit,
)

log = logging.getLogger("flux.gateway")


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """A standalone gateway process (``flux start gateway``): what ``run`` needs, defaults in ``flux.defaults``."""

    settings: GatewaySettings = field(default_factory=GatewaySettings)
    host: str = defaults.HOST
    port: int = defaults.HTTP_PORT
    # (certificate, key) PEM paths: serve HTTPS only.
    tls: tuple[str, str] | None = None
    limits: HttpLimits = field(default_factory=HttpLimits)


async def run(config: GatewayConfig) -> None:
    """Serve until SIGINT or SIGTERM. A port that cannot be bound raises OSError naming it."""
    import signal

    from flux.security import plaintext_warning

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    running = await start_gateway(
        config.settings, config.host, config.port, tls=config.tls, limits=config.limits
    )
    if config.tls is None and (warning := plaintext_warning(config.host)):
        log.warning(warning)
    # Same line as `flux start server` prints for its gateway; scripts read the port from it.
    logs.emit(f"flux gateway listening on {running.url}", logger=log.name, http=running.url)
    log.info("fronting the core at %s", config.settings.core)
    try:
        await stop.wait()
    finally:
        await running.stop()


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class RunningGateway:
    def __init__(self, server: _Server, task: asyncio.Task[None], host: str, scheme: str = "http"):
        self._server, self._task, self.host, self.scheme = server, task, host, scheme

    @property
    def port(self) -> int:
        return self._server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    async def stop(self, grace: float = 2.0) -> None:
        # Open SSE responses never end by themselves: this makes sse-starlette end them,
        # which cancels their core streams, before uvicorn waits for connections to close.
        AppStatus.should_exit = True
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), grace + 1.0)
        except TimeoutError:
            self._server.force_exit = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def start_gateway(
    settings: GatewaySettings,
    host: str = defaults.HOST,
    port: int = defaults.HTTP_PORT,
    grace: float = 2.0,
    channel: grpc.aio.Channel | None = None,
    tls: tuple[str, str] | None = None,
    limits: HttpLimits | None = None,
) -> RunningGateway:
    """Bind (port 0 picks a free one) and return once uvicorn accepts connections; HTTPS with ``tls``.

    A port that cannot be bound raises OSError naming it, before anything else starts.
    """
    limits = fit_to_open_files(limits or HttpLimits(), raise_open_files_limit())
    quiet_accept_failures()
    sock = bind(host, port)
    config = uvicorn.Config(
        create_app(settings, channel),
        host=host,
        port=port,
        log_config=None,  # keep the process's logging setup
        access_log=False,  # one line per claim and result is noise at dispatch rates
        lifespan="on",
        timeout_graceful_shutdown=grace,
        ws="none",
        http=guarded_protocol(limits),
        timeout_keep_alive=limits.keep_alive,  # type: ignore[arg-type]
        backlog=BACKLOG,
        ssl_certfile=tls[0] if tls else None,
        ssl_keyfile=tls[1] if tls else None,
    )
    server = _Server(config)

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits the process when its startup fails; we report it
            raise OSError(f"could not start the gateway on {host}:{port} (see the log above)") from exc
        finally:
            sock.close()

    task = asyncio.get_running_loop().create_task(serve(), name="flux-gateway")
    while not server.started:
        if task.done():
            task.result()
            raise OSError(f"the gateway on {host}:{port} stopped while starting")
        await asyncio.sleep(0.01)
    return RunningGateway(server, task, host, "https" if tls else "http")
