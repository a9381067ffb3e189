"""The ``flux`` command (DESIGN §6).

Exit status: 0 on success; 1 when the command was refused or the execution
failed or was cancelled; 2 for a usage error; 3 when ``run --wait --timeout``
gave up before the execution finished (it goes on; the message names it);
130 when Ctrl-C stopped a wait (the execution is left as it is).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from flux import defaults, event_loop, tracing
from flux.cli import arguments, render, tables
from flux.client import FluxClient, default_server
from flux.domain.quantity import format_bytes
from flux.errors import FluxError
from flux.observe import logs
from flux.v1 import control_pb2

EXIT_TIMED_OUT = 3
EXIT_INTERRUPTED = 130
EXIT_STATUS = (
    "exit status: 0 ok; 1 refused, or the execution failed or was cancelled; 2 usage error; "
    f"{EXIT_TIMED_OUT} --wait --timeout expired (the execution goes on); "
    f"{EXIT_INTERRUPTED} Ctrl-C while waiting (the execution is left as it is)"
)


class _Usage(Exception):
    """A usage error found after parsing (exit 2), e.g. two input sources at once."""


LOG_LEVEL_HELP = "DEBUG, INFO, WARNING or ERROR (default $FLUX_LOG_LEVEL or INFO)"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flux-dispatch")
    except PackageNotFoundError:  # running from a tree that was never installed
        return "unknown"


def leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser that runs a command (``flux start server``, ``flux workers list``, …)."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield parser
    for action in subcommands:
        for sub in dict.fromkeys(action.choices.values()):  # an alias maps to the same parser
            yield from leaf_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flux", description="Resource-aware dispatch of Python workflows.")
    parser.add_argument("--log-level", default=os.environ.get("FLUX_LOG_LEVEL", "INFO"), help=LOG_LEVEL_HELP)
    parser.add_argument("--version", action="version", version=f"flux {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_server(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--server", default=default_server(), metavar="HOST:PORT",
            help="control plane address (default $FLUX_SERVER or 127.0.0.1:50051)",
        )  # fmt: skip
        p.add_argument("--api-token", help="client token (default $FLUX_API_TOKEN or ./.flux/api.token)")
        p.add_argument("--api-token-file", help="read the client token from this file")
        p.add_argument(
            "--ca", help="CA bundle (PEM) to verify a TLS server (default $FLUX_CA; plaintext if unset)"
        )
        return p

    def with_log_format(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--log-format", choices=logs.FORMATS, default=None,
            help=f"text (default) or json: one object per line (default ${logs.ENV} or text)",
        )  # fmt: skip

    def with_tls(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tls-cert", help="serve TLS with this certificate (PEM); needs --tls-key")
        p.add_argument("--tls-key", help="private key (PEM) for --tls-cert")

    def with_cors(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--cors-origin", action="append", default=[], type=arguments.origin, metavar="URL",
            help="let pages from this origin call the HTTP gateway, e.g. https://dash.example.com; repeat "
            "for several (default: none, no CORS)",
        )  # fmt: skip

    def with_allowed_host(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--allowed-host", action="append", default=[], metavar="NAME",
            help="a Host name the HTTP gateway answers to besides the address it binds, e.g. "
            "flux.example.com; repeat for several (checked with --insecure, and whenever given)",
        )  # fmt: skip

    def with_ping_interval(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--ping-interval", type=arguments.seconds("--ping-interval"), default=defaults.PING_INTERVAL,
            help=f"seconds an idle worker stream waits before a ping (default {defaults.PING_INTERVAL:g})",
        )  # fmt: skip

    def with_http_limits(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--http-head-timeout", type=arguments.seconds("--http-head-timeout"), default=defaults.HTTP_HEAD_TIMEOUT,
            metavar="S",
            help="seconds an HTTP request's headers may take to arrive before 408 "
            f"(default {defaults.HTTP_HEAD_TIMEOUT:g})",
        )  # fmt: skip
        p.add_argument(
            "--http-max-connections", type=arguments.count("--http-max-connections"),
            default=defaults.HTTP_MAX_CONNECTIONS, metavar="N",
            help="open HTTP connections (SSE streams included) before new ones get 503 "
            f"(default {defaults.HTTP_MAX_CONNECTIONS})",
        )  # fmt: skip
        p.add_argument(
            "--http-max-connections-per-address", type=arguments.count("--http-max-connections-per-address"),
            default=0, metavar="N",
            help="open HTTP connections from one client address (IPv6: one /64) before its new ones get 503 "
            "(default: half of --http-max-connections; behind a reverse proxy, every client is the proxy)",
        )  # fmt: skip

    start = commands.add_parser("start", help="run a server or a worker").add_subparsers(
        dest="what", required=True, metavar="WHAT"
    )
    server = start.add_parser("server", help="run the control plane")
    server.add_argument("--host", default=defaults.HOST, help=f"address to bind (default {defaults.HOST})")
    server.add_argument(
        "--grpc-port",
        type=arguments.whole_number("--grpc-port"),
        default=defaults.GRPC_PORT,
        help=f"gRPC port (default {defaults.GRPC_PORT}; 0 picks one)",
    )
    server.add_argument(
        "--db",
        default=None,
        help="SQLite path, or postgresql://… to run as one of several replicas (default ./.flux/flux.db)",
    )
    server.add_argument(
        "--ack-deadline",
        type=arguments.seconds("--ack-deadline"),
        default=defaults.ACK_DEADLINE,
        help=f"seconds a dispatch may wait for its claim before it is requeued (default {defaults.ACK_DEADLINE:g})",
    )
    server.add_argument(
        "--grace-period",
        type=arguments.seconds("--grace-period"),
        default=defaults.GRACE_PERIOD,
        help=f"seconds a disconnected worker keeps its executions (default {defaults.GRACE_PERIOD:g})",
    )
    server.add_argument(
        "--safety-tick",
        type=arguments.seconds("--safety-tick"),
        default=defaults.SAFETY_TICK,
        help=argparse.SUPPRESS,
    )
    server.add_argument(
        "--starvation-after", type=arguments.seconds("--starvation-after", zero_turns_off=True),
        default=defaults.STARVATION_AFTER, metavar="S",
        help="seconds the oldest execution of a shape may wait before it gets a nominated worker, where only "
        f"work that fits beside it is placed (default {defaults.STARVATION_AFTER:g}; 0 turns aging off)",
    )  # fmt: skip
    server.add_argument(
        "--preemption", choices=("on", "off"), default="on",
        help="on (the default): a tenant under its nominal quota whose work fits only on what other tenants "
        "of its cohort borrowed preempts their newest, lowest-priority executions; off: it waits for them",
    )  # fmt: skip
    server.add_argument(
        "--preemption-grace", type=arguments.seconds("--preemption-grace"),
        default=defaults.PREEMPTION_GRACE, metavar="S",
        help="seconds a preempted execution's worker has to stop it and hand it back before its room is "
        f"freed anyway (default {defaults.PREEMPTION_GRACE:g})",
    )  # fmt: skip
    server.add_argument(
        "--dispatch-retention", type=arguments.seconds("--dispatch-retention", zero_turns_off=True),
        default=defaults.DISPATCH_RETENTION, metavar="S",
        help="with --db postgresql://: seconds the dispatches log keeps the rows of a finished execution "
        f"(default {defaults.DISPATCH_RETENTION:g}, 7 days; 0 keeps them all)",
    )  # fmt: skip
    server.add_argument(
        "--http-port", type=arguments.whole_number("--http-port"), default=defaults.HTTP_PORT,
        help=f"HTTP/SSE gateway port on the same --host (default {defaults.HTTP_PORT}; 0 picks one)",
    )  # fmt: skip
    server.add_argument("--no-http", action="store_true", help="serve gRPC only, without the gateway")
    with_cors(server)
    with_allowed_host(server)
    with_ping_interval(server)
    server.add_argument(
        "--worker-token",
        help="worker join token (default $FLUX_WORKER_TOKEN, ./.flux/worker.token, or generated)",
    )
    server.add_argument(
        "--api-token", help="client API token (default $FLUX_API_TOKEN, ./.flux/api.token, or generated)"
    )
    server.add_argument("--worker-token-file", help="read the worker join token from this file")
    server.add_argument("--api-token-file", help="read the client API token from this file")
    server.add_argument(
        "--insecure", action="store_true", help="no authentication; refused unless --host is loopback"
    )
    server.add_argument(
        "--max-pending", type=arguments.whole_number("--max-pending"), metavar="N", default=defaults.MAX_PENDING,
        help="unfinished executions accepted before RunWorkflow answers RESOURCE_EXHAUSTED "
        f"(default {defaults.MAX_PENDING})",
    )  # fmt: skip
    server.add_argument(
        "--max-pending-bytes", type=arguments.quantity("--max-pending-bytes"), metavar="BYTES",
        default=defaults.MAX_PENDING_BYTES,
        help="input bytes of unfinished executions accepted before RunWorkflow answers RESOURCE_EXHAUSTED "
        f"(default {format_bytes(defaults.MAX_PENDING_BYTES)})",
    )  # fmt: skip
    server.add_argument(
        "--max-workers", type=arguments.whole_number("--max-workers"), metavar="N", default=defaults.MAX_WORKERS,
        help=f"registered workers before Register answers RESOURCE_EXHAUSTED (default {defaults.MAX_WORKERS})",
    )  # fmt: skip
    server.add_argument(
        "--max-worker-metadata", type=arguments.quantity("--max-worker-metadata"), metavar="BYTES",
        default=defaults.MAX_WORKER_METADATA,
        help="bytes of labels, packages, markers and GPU names one worker may advertise "
        f"(default {format_bytes(defaults.MAX_WORKER_METADATA)})",
    )  # fmt: skip
    with_http_limits(server)
    with_tls(server)
    server.add_argument(
        "--keda-port", type=arguments.whole_number("--keda-port"), default=None, metavar="PORT",
        help="serve KEDA's external scaler (ScaledObject trigger metadata: pool) on this port of --host, "
        "with --tls-cert/--tls-key when given (default: not served; 0 picks one)",
    )  # fmt: skip
    server.add_argument(
        "--keda-client-ca", metavar="PEM",
        help="require KEDA to present a client certificate signed by this CA (its tlsClientCert); needs --tls-cert",
    )  # fmt: skip
    with_log_format(server)
    server.set_defaults(run=_start_server)

    gateway = start.add_parser("gateway", help="run an extra HTTP/SSE gateway in front of a core")
    gateway.add_argument("--core", required=True, metavar="HOST:PORT", help="gRPC address of the core")
    gateway.add_argument("--host", default=defaults.HOST, help=f"address to bind (default {defaults.HOST})")
    gateway.add_argument(
        "--port", type=arguments.whole_number("--port"), default=defaults.HTTP_PORT,
        help=f"HTTP port (default {defaults.HTTP_PORT}; 0 picks one)",
    )  # fmt: skip
    with_ping_interval(gateway)
    gateway.add_argument("--ca", help="CA bundle (PEM) to verify the core's TLS certificate")
    with_cors(gateway)
    with_allowed_host(gateway)
    with_http_limits(gateway)
    with_tls(gateway)
    with_log_format(gateway)
    gateway.set_defaults(run=_start_gateway)

    worker = start.add_parser("worker", help="run a worker")
    worker.add_argument("name", metavar="NAME", help="this worker's name, unique in the fleet")
    where = worker.add_mutually_exclusive_group()
    where.add_argument(
        "--server", action="append", metavar="HOST:PORT",
        help="control plane address; repeat to give fallbacks (default $FLUX_SERVER or 127.0.0.1:50051)",
    )  # fmt: skip
    where.add_argument(
        "--gateway", action="append", metavar="URL",
        help="work over HTTP/SSE through a gateway, e.g. http://127.0.0.1:8080; repeat to give fallbacks",
    )  # fmt: skip
    worker.add_argument(
        "--worker-token", help="join token (default $FLUX_WORKER_TOKEN or ./.flux/worker.token)"
    )
    worker.add_argument("--worker-token-file", help="read the join token from this file")
    worker.add_argument("--ca", help="CA bundle (PEM) to verify a TLS server (default $FLUX_CA)")
    worker.add_argument(
        "--label", action="append", type=arguments.label, default=[], metavar="KEY=VALUE",
        help="a label workflows can require with affinity; repeat for more",
    )  # fmt: skip
    worker.add_argument("--cpus", type=arguments.whole_number("--cpus"), help="cores to advertise")
    worker.add_argument("--memory", type=arguments.quantity("--memory"), help="memory to advertise, e.g. 8Gi")
    worker.add_argument("--gpus", type=arguments.whole_number("--gpus"), help="GPUs to offer (the first N)")
    worker.add_argument("--disk", type=arguments.quantity("--disk"), help="disk to advertise, e.g. 100Gi")
    worker.add_argument(
        "--disk-path",
        default=defaults.DISK_PATH,
        help=f"filesystem whose free space is reported (default {defaults.DISK_PATH})",
    )
    worker.add_argument(
        "--capacity",
        type=arguments.count("--capacity"),
        default=defaults.CAPACITY,
        help=f"concurrent executions (default {defaults.CAPACITY})",
    )
    worker.add_argument(
        "--work-dir",
        default=defaults.WORK_DIR,
        help=f"where workflow code is cached (default {defaults.WORK_DIR})",
    )
    worker.add_argument(
        "--pool", default=os.environ.get("FLUX_POOL") or None, metavar="POOL",
        help="the worker pool it belongs to, carried as the label flux/pool (default $FLUX_POOL)",
    )  # fmt: skip
    worker.add_argument(
        "--drain-timeout", type=arguments.seconds("--drain-timeout"), default=defaults.DRAIN_TIMEOUT, metavar="S",
        help="on SIGTERM, seconds to finish running executions before handing the rest back; keep it under "
        f"Kubernetes' terminationGracePeriodSeconds (default {defaults.DRAIN_TIMEOUT:g})",
    )  # fmt: skip
    with_log_format(worker)
    worker.set_defaults(run=_start_worker)

    workflow = commands.add_parser("workflow", help="register, run and follow workflows").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    register = with_server(workflow.add_parser("register", help="register every workflow in a file"))
    register.add_argument("file", metavar="FILE", help="a Python file with @workflow functions")
    register.add_argument(
        "--allow-import", action="store_true",
        help="import the file (running its code) when a decorator value is not a literal",
    )  # fmt: skip
    register.set_defaults(run=_register)
    run = with_server(workflow.add_parser("run", help="run a workflow", epilog=EXIT_STATUS))
    run.add_argument("name", metavar="NAME", help="registered workflow name")
    run.add_argument(
        "input", nargs="?", default=None, metavar="INPUT_JSON",
        help="the input as JSON, e.g. '\"World\"' (default null); - reads it from stdin",
    )  # fmt: skip
    run.add_argument("--input-file", metavar="PATH", help="read the input JSON from this file (- for stdin)")
    run.add_argument(
        "--wait", action="store_true",
        help="wait and print the output as JSON; on a terminal, a live line on stderr shows progress",
    )  # fmt: skip
    run.add_argument(
        "--timeout", type=arguments.seconds("--timeout"), default=None,
        help=f"with --wait: give up after this many seconds, exit {EXIT_TIMED_OUT} (default: wait forever)",
    )  # fmt: skip
    run.add_argument(
        "--version",
        type=arguments.whole_number("--version"),
        default=0,
        help="workflow version (default: the latest)",
    )
    run.add_argument(
        "--priority", type=arguments.priority, default=None, metavar="N",
        help="this run's priority, -1000 to 1000, higher first (default: the workflow's, else 0)",
    )  # fmt: skip
    run.add_argument(
        "--many", action="store_true",
        help="one execution per line of --input-file (JSON Lines; blank lines skipped), submitted in bulk; "
        "prints one id per line, or with --wait one output per line, in input order",
    )  # fmt: skip
    run.set_defaults(run=_run)
    status = with_server(workflow.add_parser("status", help="an execution's state"))
    status.add_argument("execution_id", metavar="EXECUTION_ID", help="the id `flux workflow run` printed")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(run=_status)
    cancel = with_server(workflow.add_parser("cancel", help="cancel an execution"))
    cancel.add_argument("execution_id", metavar="EXECUTION_ID", help="the execution to cancel")
    cancel.set_defaults(run=_cancel)

    execution = commands.add_parser("execution", help="inspect executions").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    explain = with_server(execution.add_parser("explain", help="why an execution is pending"))
    explain.add_argument("execution_id", metavar="EXECUTION_ID", help="the execution to explain")
    explain.add_argument("--json", action="store_true", help="print one JSON object")
    explain.set_defaults(run=_explain)

    from flux.cli import listings

    worker_actions = listings.add_commands(commands, workflow, execution, with_server)

    workers = commands.add_parser("workers", help="the fleet").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = with_server(workers.add_parser("list", help="workers and their resources"))
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=_workers)

    forget = with_server(
        worker_actions.add_parser(
            "forget", help="drop a worker now: requeue its work and free its name (skips its grace period)"
        )
    )
    forget.add_argument("name", metavar="NAME", help="the worker's registered name")
    forget.set_defaults(run=_forget_worker)

    from flux.cli import pools, tenants, tokens

    tokens.add_command(commands, with_server)
    pools.add_command(commands, with_server)
    tenants.add_command(commands, with_server)

    status = with_server(commands.add_parser("status", help="the fleet and the pending queue at a glance"))
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(run=_cluster_status)

    # Also after the subcommand (`flux start worker w1 --log-level DEBUG`); SUPPRESS leaves the
    # value given before it (or the default) in place when the subcommand does not repeat it.
    for leaf in leaf_parsers(parser):
        leaf.add_argument("--log-level", default=argparse.SUPPRESS, help=LOG_LEVEL_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fmt = getattr(args, "log_format", None) or logs.default_format()
    if fmt not in logs.FORMATS:
        print(f"error: ${logs.ENV} must be one of {', '.join(logs.FORMATS)}; got {fmt!r}", file=sys.stderr)
        return 2
    try:
        logs.configure(args.log_level, fmt)
    except ValueError as exc:  # an unknown --log-level
        print(f"error: --log-level: {exc}", file=sys.stderr)
        return 2
    _warn_token_flags(args)
    # Spans only where OTEL_* settings ask for them (flux/tracing.py); one service name per role.
    role = getattr(args.run, "__name__", "").removeprefix("_start_")
    tracing.setup(f"flux-{role}" if role in ("server", "worker", "gateway") else "flux-cli")
    try:
        return int(args.run(args) or 0)
    except FluxError as exc:
        _error(str(exc))
        return 1
    except (ValueError, TypeError) as exc:  # e.g. an invalid ResourceRequest in a registered file
        _error(str(exc))
        return 1
    except _Usage as exc:
        _error(str(exc))
        return 2
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        tracing.shutdown()


def _error(text: str) -> None:
    """``error: …`` on stderr; one JSON object instead where the process logs in json."""
    if logs.current_format() == "json":
        logs.emit(text, sys.stderr, "ERROR")
    else:
        print(f"error: {text}", file=sys.stderr)


def _warn_token_flags(args: argparse.Namespace) -> None:
    """A token given as a flag is in /proc/<pid>/cmdline, which every local user can read."""
    for flag in ("worker_token", "api_token"):
        if getattr(args, flag, None):
            option = "--" + flag.replace("_", "-")
            env = f"FLUX_{flag.upper()}"
            print(
                f"warning: {option} is visible to other local users in the process list "
                f"(/proc/{os.getpid()}/cmdline); prefer {option}-file PATH or ${env}",
                file=sys.stderr,
                flush=True,
            )


# ---------------------------------------------------------------------- servers


def _start_server(args: argparse.Namespace) -> int:
    import uuid

    from flux.auth import is_loopback
    from flux.dispatcher.core import Settings
    from flux.server.serve import DEFAULT_DB, ServerConfig, serve

    if args.insecure and not is_loopback(args.host):
        # Before anything is created: no token, database or ./.flux/ left behind by a refused start.
        _error(f"--insecure is refused on {args.host}: without auth the server binds to loopback only")
        return 1

    config = ServerConfig(
        host=args.host,
        grpc_port=args.grpc_port,
        db=args.db or str(DEFAULT_DB),
        dispatcher=Settings(
            ack_deadline=args.ack_deadline,
            grace_period=args.grace_period,
            safety_tick=args.safety_tick,
            starvation_after=args.starvation_after,
            preemption=args.preemption == "on",
            preemption_grace=args.preemption_grace,
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
    )
    if args.keda_client_ca and config.tls is None:
        _error("--keda-client-ca needs --tls-cert and --tls-key: client certificates need TLS")
        return 2
    from flux.store.base import StoreError

    try:
        event_loop.run(serve(config))
    except (OSError, StoreError) as exc:  # a port already taken, a database that cannot be used
        _error(str(exc))
        return 1
    return 0


def _server_tokens(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from flux.auth import STATE_DIR, Role, Tokens, server_token
    from flux.cli.tokens import generated_line

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
    from gateway.connections import HttpLimits

    return HttpLimits(
        head_timeout=args.http_head_timeout,
        max_connections=args.http_max_connections,
        max_connections_per_address=args.http_max_connections_per_address,
    )


def _allowed_hosts(args: argparse.Namespace) -> tuple[str, ...]:
    from flux.auth import is_loopback
    from gateway.browsers import allowed_hosts

    if not args.allowed_host:
        return ()
    return allowed_hosts(args.host, is_loopback(args.host), args.allowed_host)


def _client(args: argparse.Namespace) -> FluxClient:
    from flux.auth import Credentials, Role

    credentials = Credentials.for_role(Role.CLIENT, args.api_token, args.ca, args.api_token_file)
    return FluxClient(args.server, credentials=credentials)


def _start_gateway(args: argparse.Namespace) -> int:
    from gateway import GatewaySettings
    from gateway.server import GatewayConfig, run

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
        _error(str(exc))
        return 1
    return 0


def _start_worker(args: argparse.Namespace) -> int:
    from flux.auth import Credentials, Role
    from flux.worker.cpu_usage import SimulatedCpu
    from flux.worker.probe import Caps
    from flux.worker.process import WorkerProcess, run
    from flux.worker.runtime import Refused, WorkerConfig

    cpu_busy = os.environ.get(SimulatedCpu.ENV)
    try:  # read before anything starts, so a bad value is one line
        simulated_cpu = SimulatedCpu(cpu_busy) if cpu_busy else None
    except ValueError as exc:
        _error(str(exc))
        return 1
    chosen = args.gateway or args.server or [default_server()]
    labels = dict(args.label)
    if args.pool is not None:
        from flux.matching.pools import POOL_LABEL, validate_pool_name

        try:
            labels[POOL_LABEL] = validate_pool_name(args.pool, "--pool")
        except ValueError as exc:
            _error(str(exc))
            return 2
    config = WorkerProcess(
        worker=WorkerConfig(
            name=args.name, labels=labels, capacity=args.capacity, work_dir=Path(args.work_dir)
        ),
        addresses=tuple(a for value in chosen for a in value.split(",") if a),
        over_gateway=bool(args.gateway),
        credentials=Credentials.for_role(Role.WORKER, args.worker_token, args.ca, args.worker_token_file),
        caps=Caps(cpus=args.cpus, memory=args.memory, gpus=args.gpus, disk=args.disk),
        disk_path=args.disk_path,
        cpu_observer=simulated_cpu,
    )
    try:
        event_loop.run(run(config))
    except Refused as refused:
        _error(_refusal_advice(refused))
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


# ---------------------------------------------------------------------- client commands


def _register(args: argparse.Namespace) -> int:
    from flux.loader import load_workflow_file

    loaded = load_workflow_file(args.file, allow_import=args.allow_import)
    for note in loaded.notes:  # the file had to be imported: say which value made it so
        print(note, file=sys.stderr)
    with _client(args) as client:
        response = client.register(loaded)
    for wf in response.workflows:
        if wf.unchanged:
            print(f"unchanged {wf.name} v{wf.version} ({wf.source_hash[:12]}): already registered as is")
        else:
            print(f"registered {wf.name} v{wf.version} ({wf.source_hash[:12]})")
    return 0


def _read_input(args: argparse.Namespace) -> tuple[str, str]:
    """The input JSON from INPUT_JSON, ``-`` (stdin) or --input-file (a path, or - for stdin),
    and how to name where it came from in an error."""
    if args.input is not None and args.input_file is not None:
        raise _Usage("give the input once: INPUT_JSON, - (stdin) or --input-file PATH")
    if args.input_file is None and args.input != "-":
        return ("null" if args.input is None else args.input), "INPUT_JSON"
    if "-" in (args.input, args.input_file):
        return sys.stdin.read(), "the input read from stdin"
    try:
        return Path(args.input_file).read_text(encoding="utf-8"), f"--input-file {args.input_file}"
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise _Usage(f"--input-file {args.input_file!r} cannot be read: {reason}") from None


def _run(args: argparse.Namespace) -> int:
    if args.many:
        from flux.cli import many

        if args.input_file is None and args.input != "-":
            raise _Usage("--many reads JSON Lines: give --input-file PATH (- for stdin)")
        text, _ = _read_input(args)
        name = "<stdin>" if "-" in (args.input, args.input_file) else args.input_file
        with _client(args) as client:
            return many.run_many(client, args, text, name)
    text, where = _read_input(args)
    try:
        json.loads(text)
    except ValueError as exc:
        print(f"error: {where} is not valid JSON ({exc}); quote strings, e.g. '\"World\"'", file=sys.stderr)
        return 1
    from flux.cli.progress import Follower
    from flux.client import WaitTimedOut

    with _client(args) as client:
        if not args.wait:
            execution = client.run_json(args.name, text, version=args.version, priority=args.priority)
            print(execution.execution_id)
            return 0
        follower = Follower(client, sys.stderr if sys.stderr.isatty() else None)
        try:
            final = follower.run(args.name, text, args.version, args.priority, args.timeout)
        except WaitTimedOut as exc:
            print(f"{exc} — flux execution explain {exc.execution.execution_id}", file=sys.stderr)
            return EXIT_TIMED_OUT
        except KeyboardInterrupt:
            latest = follower.latest
            if latest is None:
                print("\nstopped before the server answered; the run may have been accepted", file=sys.stderr)
                return EXIT_INTERRUPTED
            with contextlib.suppress(FluxError):  # its state now, if the server answers at once
                latest = client.get(latest.execution_id, timeout=2.0)
            print(
                f"\nstopped waiting; execution {latest.execution_id} is left {render.state_name(latest.state)}"
                f" — cancel it with: flux workflow cancel {latest.execution_id}",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
    if final.state == control_pb2.EXECUTION_STATE_COMPLETED:
        print(final.output_json or "null")
        return 0
    if final.HasField("error"):
        print(f"error: {final.error.type}: {final.error.message}", file=sys.stderr)
        if final.error.traceback:
            print(final.error.traceback, file=sys.stderr)
    else:
        print(f"error: execution {final.execution_id} is {render.state_name(final.state)}", file=sys.stderr)
    return 1


def _status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        execution = client.get(args.execution_id)
    if args.json:
        print(json.dumps(render.execution_dict(execution)))
    else:
        print(render.execution_text(execution))
    return (
        1
        if execution.state in (control_pb2.EXECUTION_STATE_FAILED, control_pb2.EXECUTION_STATE_CANCELLED)
        else 0
    )


def _cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        execution = client.cancel(args.execution_id)
    print(f"{execution.execution_id} {render.state_name(execution.state)}")
    return 0


def _explain(args: argparse.Namespace) -> int:
    with _client(args) as client:
        explanation = client.explain(args.execution_id)
    print(
        json.dumps(render.explanation_dict(explanation))
        if args.json
        else render.explanation_text(explanation)
    )
    return 0


def _workers(args: argparse.Namespace) -> int:
    import time

    with _client(args) as client:
        response = client.workers()
    if args.json:
        print(json.dumps({"workers": [render.worker_dict(w) for w in response.workers]}))
    else:
        print(render.workers_text(response.workers, int(time.time() * 1000), tables.terminal_width()))
    return 0


def _forget_worker(args: argparse.Namespace) -> int:
    with _client(args) as client:
        response = client.forget_worker(args.name)
    print(f"forgot worker {args.name}; {response.requeued} executions requeued")
    return 0


def _cluster_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = client.status()
    print(
        json.dumps(render.status_dict(status))
        if args.json
        else render.status_text(status, tables.terminal_width())
    )
    return 0
