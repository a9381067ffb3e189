"""A worker process (``flux start worker``): the config the CLI builds, and ``run``.

The CLI only parses flags into ``WorkerProcess``; which transport, which probe
and how signals stop the worker are decided here, once.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass, field

from flux import defaults
from flux.observe import logs
from flux.security import Credentials
from flux.worker.cpu_usage import CpuObserver
from flux.worker.gpu import SimulatedGpuReader
from flux.worker.probe import Caps, ResourceProbe
from flux.worker.runtime import WorkerConfig, WorkerRuntime
from flux.worker.transport import WorkerTransport


@dataclass(frozen=True, slots=True)
class WorkerProcess:
    worker: WorkerConfig
    # gRPC HOST:PORT addresses, or gateway URLs with ``over_gateway``; tried in turn.
    addresses: tuple[str, ...] = (defaults.SERVER,)
    over_gateway: bool = False
    credentials: Credentials = field(default_factory=Credentials)
    # What to advertise at most (--cpus, --memory, --gpus, --disk), below what is measured.
    caps: Caps = field(default_factory=Caps)
    disk_path: str = defaults.DISK_PATH
    # How busy the host is with foreign load; None measures it (FLUX_SIMULATED_CPU_BUSY describes it).
    cpu_observer: CpuObserver | None = None
    # (host, port) of the /healthz and /readyz endpoint for kubelet probes (--health-port); None: not served.
    health: tuple[str, int] | None = None


def _transport(config: WorkerProcess) -> WorkerTransport:
    if config.over_gateway:
        from flux.worker.sse_transport import SseTransport

        return SseTransport(list(config.addresses), credentials=config.credentials)
    from flux.worker.grpc_transport import GrpcTransport

    return GrpcTransport(list(config.addresses), config.credentials)


async def run(config: WorkerProcess) -> None:
    """Serve until SIGINT or SIGTERM (then drain); raises ``Refused`` when the server refuses us for good."""
    simulated = os.environ.get(SimulatedGpuReader.ENV)  # tests and demos: GPUs without a device
    probe = ResourceProbe(
        config.caps,
        disk_path=config.disk_path,
        gpu_readers=[SimulatedGpuReader(simulated)] if simulated else None,
        cpu_observer=config.cpu_observer,
    )
    runtime = WorkerRuntime(config.worker, _transport(config), probe)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, runtime.stop)
    health = None
    if config.health is not None:
        from flux.worker.health import HealthServer

        health = HealthServer(lambda: runtime.ready)
        host, port = config.health
        bound = await health.start(host, port)
        # Tests and scripts read the bound port from this line (--health-port 0 picks one).
        address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        logs.emit(
            f"flux worker health on {address} (/healthz, /readyz)", logger="flux.worker", health=address
        )
    where = ", ".join(config.addresses)
    logs.emit(f"flux worker {config.worker.name} connecting to {where}", logger="flux.worker")
    try:
        await runtime.run()
    finally:
        if health is not None:
            await health.close()
