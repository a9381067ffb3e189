"""The ``flux`` command (DESIGN §6).

Exit status: 0 on success; 1 when the command was refused or the execution
failed or was cancelled; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from flux.cli import render
from flux.client import FluxClient, default_server
from flux.domain.labels import parse_label_argument
from flux.domain.quantity import parse_bytes
from flux.errors import FluxError
from flux.observe import logs
from flux.v1 import control_pb2


def _positive_int(flag: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a whole number; got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{flag} must be >= 0; got {value}")
        return value

    return parse


def _quantity(flag: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        try:
            return parse_bytes(int(text) if text.isdigit() else text, flag)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _label(text: str) -> tuple[str, str]:
    try:
        return parse_label_argument(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(flag: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number of seconds; got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{flag} must be > 0 seconds; got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flux", description="Resource-aware dispatch of Python workflows.")
    parser.add_argument("--log-level", default=os.environ.get("FLUX_LOG_LEVEL", "INFO"), help="default INFO")
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

    start = commands.add_parser("start", help="run a server or a worker").add_subparsers(
        dest="what", required=True, metavar="WHAT"
    )
    server = start.add_parser("server", help="run the control plane")
    server.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    server.add_argument(
        "--grpc-port", type=_positive_int("--grpc-port"), default=50051, help="default 50051; 0 picks one"
    )
    server.add_argument(
        "--db",
        default=None,
        help="SQLite path, or postgresql://… to run as one of several replicas (default ./.flux/flux.db)",
    )
    server.add_argument(
        "--ack-deadline", type=_seconds("--ack-deadline"), default=10.0, help="seconds (default 10)"
    )
    server.add_argument(
        "--grace-period", type=_seconds("--grace-period"), default=30.0, help="seconds (default 30)"
    )
    server.add_argument("--safety-tick", type=_seconds("--safety-tick"), default=5.0, help=argparse.SUPPRESS)
    server.add_argument(
        "--http-port", type=_positive_int("--http-port"), default=8080,
        help="HTTP/SSE gateway port on the same --host (default 8080; 0 picks one)",
    )  # fmt: skip
    server.add_argument("--no-http", action="store_true", help="serve gRPC only, without the gateway")
    server.add_argument(
        "--ping-interval", type=_seconds("--ping-interval"), default=15.0,
        help="seconds an idle worker stream waits before a ping (default 15)",
    )  # fmt: skip
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
        "--max-pending", type=_positive_int("--max-pending"), metavar="N",         help="unfinished executions accepted before RunWorkflow answers RESOURCE_EXHAUSTED (default 500000)",
    )  # fmt: skip
    server.add_argument(
        "--max-pending-bytes", type=_quantity("--max-pending-bytes"), metavar="BYTES",
        help="input bytes of unfinished executions accepted before RunWorkflow answers RESOURCE_EXHAUSTED "
        "(default 2Gi)",
    )  # fmt: skip
    server.add_argument(
        "--max-workers", type=_positive_int("--max-workers"), metavar="N",
        help="registered workers before Register answers RESOURCE_EXHAUSTED (default 10000)",
    )  # fmt: skip
    server.add_argument(
        "--max-worker-metadata", type=_quantity("--max-worker-metadata"), metavar="BYTES",
        help="bytes of labels, packages, markers and GPU names one worker may advertise (default 256Ki)",
    )  # fmt: skip
    with_tls(server)
    with_log_format(server)
    server.set_defaults(run=_start_server)

    gateway = start.add_parser("gateway", help="run an extra HTTP/SSE gateway in front of a core")
    gateway.add_argument("--core", required=True, metavar="HOST:PORT", help="gRPC address of the core")
    gateway.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    gateway.add_argument(
        "--port", type=_positive_int("--port"), default=8080, help="default 8080; 0 picks one"
    )
    gateway.add_argument(
        "--ping-interval", type=_seconds("--ping-interval"), default=15.0,
        help="seconds an idle worker stream waits before a ping (default 15)",
    )  # fmt: skip
    gateway.add_argument("--ca", help="CA bundle (PEM) to verify the core's TLS certificate")
    with_tls(gateway)
    with_log_format(gateway)
    gateway.set_defaults(run=_start_gateway)

    worker = start.add_parser("worker", help="run a worker")
    worker.add_argument("name", metavar="NAME")
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
    worker.add_argument("--label", action="append", type=_label, default=[], metavar="KEY=VALUE")
    worker.add_argument("--cpus", type=_positive_int("--cpus"), help="cores to advertise")
    worker.add_argument("--memory", type=_quantity("--memory"), help="memory to advertise, e.g. 8Gi")
    worker.add_argument("--gpus", type=_positive_int("--gpus"), help="GPUs to offer (the first N)")
    worker.add_argument("--disk", type=_quantity("--disk"), help="disk to advertise, e.g. 100Gi")
    worker.add_argument(
        "--disk-path", default="/", help="filesystem whose free space is reported (default /)"
    )
    worker.add_argument(
        "--capacity", type=_positive_int("--capacity"), default=16, help="concurrent executions (16)"
    )
    worker.add_argument("--work-dir", default=".flux/worker", help="where workflow code is cached")
    with_log_format(worker)
    worker.set_defaults(run=_start_worker)

    workflow = commands.add_parser("workflow", help="register, run and follow workflows").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    register = with_server(workflow.add_parser("register", help="register every workflow in a file"))
    register.add_argument("file", metavar="FILE")
    register.set_defaults(run=_register)
    run = with_server(workflow.add_parser("run", help="run a workflow"))
    run.add_argument("name", metavar="NAME")
    run.add_argument("input", nargs="?", default="null", metavar="INPUT_JSON")
    run.add_argument("--wait", action="store_true", help="wait and print the output as JSON")
    run.add_argument(
        "--timeout", type=_seconds("--timeout"), default=None, help="with --wait: give up after seconds"
    )
    run.add_argument(
        "--version", type=_positive_int("--version"), default=0, help="workflow version (latest)"
    )
    run.set_defaults(run=_run)
    status = with_server(workflow.add_parser("status", help="an execution's state"))
    status.add_argument("execution_id", metavar="EXECUTION_ID")
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=_status)
    cancel = with_server(workflow.add_parser("cancel", help="cancel an execution"))
    cancel.add_argument("execution_id", metavar="EXECUTION_ID")
    cancel.set_defaults(run=_cancel)

    execution = commands.add_parser("execution", help="inspect executions").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    explain = with_server(execution.add_parser("explain", help="why an execution is pending"))
    explain.add_argument("execution_id", metavar="EXECUTION_ID")
    explain.add_argument("--json", action="store_true")
    explain.set_defaults(run=_explain)

    workers = commands.add_parser("workers", help="the fleet").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = with_server(workers.add_parser("list", help="workers and their resources"))
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=_workers)

    worker_actions = commands.add_parser("worker", help="act on one worker").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    forget = with_server(
        worker_actions.add_parser(
            "forget", help="drop a worker now: requeue its work and free its name (skips its grace period)"
        )
    )
    forget.add_argument("name", metavar="NAME")
    forget.set_defaults(run=_forget_worker)

    status = with_server(commands.add_parser("status", help="the fleet and the pending queue at a glance"))
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=_cluster_status)
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
    try:
        return int(args.run(args) or 0)
    except FluxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:  # e.g. an invalid ResourceRequest in a registered file
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


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

    from flux.dispatcher.core import Settings
    from flux.server.serve import DEFAULT_DB, ServerConfig, serve

    config = ServerConfig(
        host=args.host,
        grpc_port=args.grpc_port,
        db=args.db or str(DEFAULT_DB),
        dispatcher=Settings(
            ack_deadline=args.ack_deadline,
            grace_period=args.grace_period,
            safety_tick=args.safety_tick,
            ping_interval=args.ping_interval,
            server_id=uuid.uuid4().hex[:12],
            # Limits left unset keep the dispatcher's defaults (one place defines them).
            **{
                limit: getattr(args, limit)
                for limit in ("max_pending", "max_pending_bytes", "max_workers", "max_worker_metadata")
                if getattr(args, limit) is not None
            },
        ),
        http_port=None if args.no_http else args.http_port,
        tokens=None if args.insecure else _server_tokens(args),
        tls=_tls(args),
    )
    from flux.store.base import StoreError

    try:
        asyncio.run(serve(config))
    except (OSError, StoreError) as exc:  # a port already taken, a database that cannot be used
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _server_tokens(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from flux.auth import Role, Tokens, server_token

    worker, new_worker = server_token(Role.WORKER, args.worker_token, args.worker_token_file)
    api, new_api = server_token(Role.CLIENT, args.api_token, args.api_token_file)
    for role, token, new in ((Role.WORKER, worker, new_worker), (Role.CLIENT, api, new_api)):
        if new:  # printed once, on the start that created it; never logged
            print(
                f"generated {role.value} token (kept in .flux/{role.filename}, owner-only): {token}",
                file=sys.stderr,
                flush=True,
            )
    return Tokens(worker=worker, api=api)


def _tls(args: argparse.Namespace) -> tuple[str, str] | None:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together: give both, or neither")
    return (args.tls_cert, args.tls_key) if args.tls_cert else None


def _client(args: argparse.Namespace) -> FluxClient:
    from flux.auth import Credentials, Role

    credentials = Credentials.for_role(Role.CLIENT, args.api_token, args.ca, args.api_token_file)
    return FluxClient(args.server, credentials=credentials)


def _start_gateway(args: argparse.Namespace) -> int:
    import signal

    from gateway import GatewaySettings, start_gateway

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        settings = GatewaySettings(core=args.core, ping_interval=args.ping_interval, core_ca=args.ca)
        running = await start_gateway(settings, args.host, args.port, tls=_tls(args))
        # Same line as `flux start server` prints for its gateway; scripts read the port from it.
        print(f"flux gateway listening on {running.url}", flush=True)
        logging.getLogger("flux.gateway").info("fronting the core at %s", args.core)
        try:
            await stop.wait()
        finally:
            await running.stop()

    try:
        asyncio.run(run())
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _start_worker(args: argparse.Namespace) -> int:
    import signal

    from flux.auth import Credentials, Role
    from flux.worker.gpu import SimulatedGpuReader
    from flux.worker.grpc_transport import GrpcTransport
    from flux.worker.probe import Caps, ResourceProbe
    from flux.worker.runtime import WorkerConfig, WorkerRuntime
    from flux.worker.sse_transport import SseTransport
    from flux.worker.transport import WorkerTransport

    simulated = os.environ.get(SimulatedGpuReader.ENV)
    probe = ResourceProbe(
        Caps(cpus=args.cpus, memory=args.memory, gpus=args.gpus, disk=args.disk),
        disk_path=args.disk_path,
        gpu_readers=[SimulatedGpuReader(simulated)] if simulated else None,
    )
    chosen = args.gateway or args.server or [default_server()]
    addresses = [a for value in chosen for a in value.split(",") if a]
    config = WorkerConfig(
        name=args.name, labels=dict(args.label), capacity=args.capacity or 16, work_dir=Path(args.work_dir)
    )

    async def run() -> None:
        credentials = Credentials.for_role(Role.WORKER, args.worker_token, args.ca, args.worker_token_file)
        transport: WorkerTransport = (
            SseTransport(addresses, credentials=credentials)
            if args.gateway
            else GrpcTransport(addresses, credentials)
        )
        runtime = WorkerRuntime(config, transport, probe)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, runtime.stop)
        print(f"flux worker {args.name} connecting to {', '.join(addresses)}", flush=True)
        await runtime.run()

    asyncio.run(run())
    return 0


# ---------------------------------------------------------------------- client commands


def _register(args: argparse.Namespace) -> int:
    with _client(args) as client:
        response = client.register_file(args.file)
    for wf in response.workflows:
        print(f"registered {wf.name} v{wf.version} ({wf.source_hash[:12]})")
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        json.loads(args.input)
    except ValueError as exc:
        print(
            f"error: INPUT_JSON is not valid JSON ({exc}); quote strings, e.g. '\"World\"'", file=sys.stderr
        )
        return 1
    with _client(args) as client:
        execution = client.run_json(args.name, args.input, version=args.version)
        if not args.wait:
            print(execution.execution_id)
            return 0
        final = client.wait(execution.execution_id, args.timeout)
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
        print(render.workers_text(response.workers, int(time.time() * 1000)))
    return 0


def _forget_worker(args: argparse.Namespace) -> int:
    with _client(args) as client:
        response = client.forget_worker(args.name)
    print(f"forgot worker {args.name}; {response.requeued} executions requeued")
    return 0


def _cluster_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = client.status()
    print(json.dumps(render.status_dict(status)) if args.json else render.status_text(status))
    return 0
