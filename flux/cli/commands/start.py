"""``flux start server|gateway|worker``: run the control plane, an extra HTTP gateway, or a worker.

Each handler imports what it runs when it runs, so a client command never loads the
server, the gateway (FastAPI, uvicorn) or the worker's probes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import flux.cli.event_loop as event_loop
from flux.cli.support import error
from flux.defaults import default_server
from flux.observe import logs


def start_server(args: argparse.Namespace) -> int:
    import uuid

    from flux.dispatcher.core import Settings
    from flux.security import is_loopback
    from flux.server.serve import ServerConfig, keda_refusal, resolve_db, serve

    if args.insecure and not is_loopback(args.host):
        # Before anything is created: no token, database or ./.flux/ left behind by a refused start.
        error(f"--insecure is refused on {args.host}: without auth the server binds to loopback only")
        return 1
    keda = ServerConfig(
        host=args.host, tls=_tls(args), keda_port=args.keda_port, keda_client_ca=args.keda_client_ca,
        keda_insecure=args.keda_insecure,
    )  # fmt: skip
    if refused := keda_refusal(keda):  # also before any token is generated
        error(refused)
        return 2

    try:
        db = resolve_db(args.db, args.db_file, os.environ)
    except ValueError as exc:
        error(str(exc))
        return 2
    config = ServerConfig(
        host=args.host,
        grpc_port=args.grpc_port,
        db=db,
        dispatcher=Settings(
            ack_deadline=args.ack_deadline,
            grace_period=args.grace_period,
            safety_tick=args.safety_tick,
            starvation_after=args.starvation_after,
            infeasible_after=args.infeasible_after,
            placement=args.placement,
            preemption=args.preemption == "on",
            preemption_grace=args.preemption_grace,
            preemption_budget=args.preemption_budget,
            dispatch_retention=args.dispatch_retention,
            ping_interval=args.ping_interval,
            server_id=uuid.uuid4().hex[:12],
            max_pending=args.max_pending,
            max_pending_bytes=args.max_pending_bytes,
            max_workers=args.max_workers,
            max_worker_metadata=args.max_worker_metadata,
        ),
        http_port=None if args.no_http else args.http_port,
        tokens=None if args.insecure else _server_tokens(args),
        tls=_tls(args),
        cors_origins=tuple(args.cors_origin),
        allowed_hosts=tuple(args.allowed_host),
        # Not with --no-http: the gateway's modules (FastAPI, pydantic, uvicorn) stay unimported.
        http_limits=None if args.no_http else _http_limits(args),
        keda_port=args.keda_port,
        keda_client_ca=args.keda_client_ca,
        keda_insecure=args.keda_insecure,
        keda_max_streams=args.keda_max_streams,
        keda_max_streams_per_peer=args.keda_max_streams_per_peer,
        metrics_token=_metrics_token(args),
    )
    from flux.store import StoreError

    try:
        event_loop.run(serve(config))
    except (OSError, StoreError) as exc:  # a port already taken, a database that cannot be used
        error(str(exc))
        return 1
    return 0


def _metrics_token(args: argparse.Namespace) -> str:
    from flux.security import token_file

    return token_file(args.metrics_token_file) if args.metrics_token_file else ""


def _server_tokens(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from flux.cli.commands.tokens import generated_line
    from flux.security import STATE_DIR, Role, Tokens, server_token

    worker, new_worker = server_token(Role.WORKER, args.worker_token, args.worker_token_file)
    api, new_api = server_token(Role.CLIENT, args.api_token, args.api_token_file)
    for role, new in ((Role.WORKER, new_worker), (Role.CLIENT, new_api)):
        if new:  # where it was written, never the token: log collectors keep this output
            logs.emit(generated_line(role, STATE_DIR / role.filename), sys.stderr, "WARNING")
    return Tokens(worker=worker, api=api)


def _tls(args: argparse.Namespace) -> tuple[str, str] | None:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together: give both, or neither")
    return (args.tls_cert, args.tls_key) if args.tls_cert else None


def _http_limits(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from gateway import HttpLimits

    return HttpLimits(
        head_timeout=args.http_head_timeout,
        max_connections=args.http_max_connections,
        max_connections_per_address=args.http_max_connections_per_address,
    )


def _allowed_hosts(args: argparse.Namespace) -> tuple[str, ...]:
    from flux.security import is_loopback
    from gateway import allowed_hosts

    if not args.allowed_host:
        return ()
    return allowed_hosts(args.host, is_loopback(args.host), args.allowed_host)


def start_gateway(args: argparse.Namespace) -> int:
    from gateway import GatewayConfig, GatewaySettings, run

    config = GatewayConfig(
        settings=GatewaySettings(
            core=args.core,
            ping_interval=args.ping_interval,
            core_ca=args.ca,
            cors_origins=tuple(args.cors_origin),
            allowed_hosts=_allowed_hosts(args),
        ),
        host=args.host,
        port=args.port,
        tls=_tls(args),
        limits=_http_limits(args),
    )
    try:
        event_loop.run(run(config))
    except OSError as exc:
        hint = "; pick another with --port PORT" if str(exc).startswith("the HTTP port") else ""
        error(f"{exc}{hint}")
        return 1
    return 0


def start_worker(args: argparse.Namespace) -> int:
    from flux.security import Credentials, Role
    from flux.worker.cpu_usage import SimulatedCpu
    from flux.worker.health import HealthBindError
    from flux.worker.probe import Caps
    from flux.worker.process import WorkerProcess, run
    from flux.worker.runtime import Refused, WorkerConfig

    cpu_busy = os.environ.get(SimulatedCpu.ENV)
    try:  # read before anything starts, so a bad value is one line
        simulated_cpu = SimulatedCpu(cpu_busy) if cpu_busy else None
    except ValueError as exc:
        error(str(exc))
        return 1
    chosen = args.gateway or args.server or [default_server()]
    labels = dict(args.label)
    if args.pool is not None:
        from flux.matching.pools import POOL_LABEL, validate_pool_name

        try:
            labels[POOL_LABEL] = validate_pool_name(args.pool, "--pool")
        except ValueError as exc:
            error(str(exc))
            return 2
    credentials = Credentials.for_role(Role.WORKER, args.worker_token, args.ca, args.worker_token_file)
    # Read once, then out of the environment: workflow bodies run in this process and start
    # processes of their own, and neither should find the worker's token there (it still holds
    # it in memory: what bounds a leaked one is its pool, flux token create --worker --pool).
    for variable in (Role.WORKER.env, Role.WORKER.file_env):
        os.environ.pop(variable, None)
    config = WorkerProcess(
        worker=WorkerConfig(
            name=args.name,
            labels=labels,
            capacity=args.capacity,
            work_dir=Path(args.work_dir),
            advertise_address=args.advertise_address,
            prefetch=args.prefetch,
        ),
        addresses=tuple(a for value in chosen for a in value.split(",") if a),
        over_gateway=bool(args.gateway),
        credentials=credentials,
        caps=Caps(cpus=args.cpus, memory=args.memory, gpus=args.gpus, disk=args.disk),
        disk_path=args.disk_path,
        cpu_observer=simulated_cpu,
        health=None if args.health_port is None else (args.health_host, args.health_port),
    )
    try:
        event_loop.run(run(config))
    except Refused as refused:
        error(_refusal_advice(refused))
        return 1
    except HealthBindError as exc:
        error(str(exc))
        return 1
    return 0


def _refusal_advice(refused: Exception) -> str:
    """One line: what the server said, and what to change before starting the worker again."""
    from flux.errors import InvalidArgument

    cause = getattr(refused, "cause", refused)
    if isinstance(cause, InvalidArgument):
        return f"refused by the server: {refused}; fix the value it names and start the worker again"
    return (
        f"refused by the server: {refused}; pass the worker token with --worker-token-file or "
        "$FLUX_WORKER_TOKEN (the server keeps it in ./.flux/worker.token)"
    )
