"""The ``flux start server|gateway|worker`` parsers: every flag that configures a process.

``flux.cli.parser`` adds this group beside the client commands; the handlers are in
``flux.cli.commands.start``.
"""

from __future__ import annotations

import argparse
import os

from flux import defaults
from flux.cli.arguments import (
    count,
    duration,
    label,
    origin,
    prefetch_count,
    quantity,
    seconds,
    whole_number,
)
from flux.cli.commands.lazy import command
from flux.domain.quantity import format_bytes
from flux.observe import logs


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
        "--cors-origin", action="append", default=[], type=origin, metavar="URL",
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
        "--ping-interval", type=seconds("--ping-interval"), default=defaults.PING_INTERVAL,
        help=f"seconds an idle worker stream waits before a ping (default {defaults.PING_INTERVAL:g})",
    )  # fmt: skip


def with_http_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--http-head-timeout", type=seconds("--http-head-timeout"), default=defaults.HTTP_HEAD_TIMEOUT,
        metavar="S",
        help="seconds an HTTP request's headers may take to arrive before 408 "
        f"(default {defaults.HTTP_HEAD_TIMEOUT:g})",
    )  # fmt: skip
    p.add_argument(
        "--http-max-connections", type=count("--http-max-connections"),
        default=defaults.HTTP_MAX_CONNECTIONS, metavar="N",
        help="open HTTP connections (SSE streams included) before new ones get 503 "
        f"(default {defaults.HTTP_MAX_CONNECTIONS})",
    )  # fmt: skip
    p.add_argument(
        "--http-max-connections-per-address", type=count("--http-max-connections-per-address"),
        default=0, metavar="N",
        help="open HTTP connections from one client address (IPv6: one /64) before its new ones get 503 "
        "(default: half of --http-max-connections; behind a reverse proxy, every client is the proxy)",
    )  # fmt: skip


def add_start(commands: argparse._SubParsersAction) -> None:
    start = commands.add_parser("start", help="run a server, a worker or a gateway").add_subparsers(
        dest="what", required=True, metavar="WHAT"
    )
    server = start.add_parser("server", help="run the control plane")
    server.add_argument("--host", default=defaults.HOST, help=f"address to bind (default {defaults.HOST})")
    server.add_argument(
        "--grpc-port",
        type=whole_number("--grpc-port"),
        default=defaults.GRPC_PORT,
        help=f"gRPC port (default {defaults.GRPC_PORT}; 0 picks one)",
    )
    server.add_argument(
        "--db", default=None, metavar="URL",
        help="SQLite path, or postgresql://… to run as one of several replicas (default --db-file, "
        "$FLUX_DB_URL, or ./.flux/flux.db). A URL with a password is readable by every local user in "
        "/proc/<pid>/cmdline: give it with --db-file or $FLUX_DB_URL instead",
    )  # fmt: skip
    server.add_argument(
        "--db-file", default=None, metavar="PATH",
        help="read --db from this file (its whole content, trailing newline stripped), e.g. a mounted Secret",
    )  # fmt: skip
    server.add_argument(
        "--ack-deadline",
        type=seconds("--ack-deadline"),
        default=defaults.ACK_DEADLINE,
        help=f"seconds a dispatch may wait for its claim before it is requeued (default {defaults.ACK_DEADLINE:g})",
    )
    server.add_argument(
        "--grace-period",
        type=seconds("--grace-period"),
        default=defaults.GRACE_PERIOD,
        help=f"seconds a disconnected worker keeps its executions (default {defaults.GRACE_PERIOD:g})",
    )
    server.add_argument(
        "--safety-tick",
        type=seconds("--safety-tick"),
        default=defaults.SAFETY_TICK,
        help=argparse.SUPPRESS,
    )
    server.add_argument(
        "--starvation-after", type=seconds("--starvation-after", zero_turns_off=True),
        default=defaults.STARVATION_AFTER, metavar="S",
        help="seconds the oldest execution of a shape may wait before it gets a nominated worker, where only "
        f"work that fits beside it is placed (default {defaults.STARVATION_AFTER:g}; 0 turns aging off)",
    )  # fmt: skip
    server.add_argument(
        "--infeasible-after", type=duration("--infeasible-after"), default=0.0, metavar="DURATION",
        help="fail work that no connected worker and no pool could ever run once it has been infeasible this "
        "long (e.g. 10m): FAILED, reason pending_timeout, explain's verdict as its error; work that becomes "
        "feasible meanwhile waits on (default off: explain only says it is infeasible)",
    )  # fmt: skip
    server.add_argument(
        "--placement", choices=("spread", "binpack"), default="spread",
        help="which capable worker work goes to, unless its workflow says placement=...: spread (the default) "
        "the least loaded; binpack the fullest that fits, fewest free GPUs first and devices chosen to keep "
        "aligned blocks whole, so idle workers stay idle and a pool can scale in",
    )  # fmt: skip
    server.add_argument(
        "--preemption", choices=("on", "off"), default="on",
        help="on (the default): a tenant under its nominal quota whose work fits only on what other tenants "
        "of its cohort borrowed preempts their newest, lowest-priority executions; off: it waits for them",
    )  # fmt: skip
    server.add_argument(
        "--preemption-grace", type=seconds("--preemption-grace"),
        default=defaults.PREEMPTION_GRACE, metavar="S",
        help="seconds a preempted execution's worker has to stop it and hand it back before its room is "
        f"freed anyway (default {defaults.PREEMPTION_GRACE:g})",
    )  # fmt: skip
    server.add_argument(
        "--preemption-budget", type=whole_number("--preemption-budget"),
        default=defaults.PREEMPTION_BUDGET, metavar="N",
        help="executions each tenant's preemptions may stop a minute; a reclaim past it waits (explain says "
        f"how long) and counts in flux_preemptions_refused_total (default {defaults.PREEMPTION_BUDGET}; "
        "0: no limit)",
    )  # fmt: skip
    server.add_argument(
        "--dispatch-retention", type=seconds("--dispatch-retention", zero_turns_off=True),
        default=defaults.DISPATCH_RETENTION, metavar="S",
        help="with --db postgresql://: seconds the dispatches log keeps the rows of a finished execution "
        f"(default {defaults.DISPATCH_RETENTION:g}, 7 days; 0 keeps them all)",
    )  # fmt: skip
    server.add_argument(
        "--http-port", type=whole_number("--http-port"), default=defaults.HTTP_PORT,
        help=f"HTTP/SSE gateway port on the same --host (default {defaults.HTTP_PORT}; 0 picks one)",
    )  # fmt: skip
    server.add_argument("--no-http", action="store_true", help="serve gRPC only, without the gateway")
    with_cors(server)
    with_allowed_host(server)
    with_ping_interval(server)
    server.add_argument(
        "--worker-token",
        help="worker join token (default $FLUX_WORKER_TOKEN, the file $FLUX_WORKER_TOKEN_FILE names, "
        "./.flux/worker.token, or generated)",
    )
    server.add_argument(
        "--api-token",
        help="client API token (default $FLUX_API_TOKEN, the file $FLUX_API_TOKEN_FILE names, "
        "./.flux/api.token, or generated)",
    )
    server.add_argument("--worker-token-file", help="read the worker join token from this file")
    server.add_argument("--api-token-file", help="read the client API token from this file")
    server.add_argument(
        "--metrics-token-file", metavar="FILE",
        help="the token Prometheus presents (Authorization: Bearer) to see per-tenant series on /metrics "
        "(flux_tenant_*, refusals by tenant); a cluster-admin API token sees them too, and without a "
        "token /metrics answers aggregates only",
    )  # fmt: skip
    server.add_argument(
        "--insecure", action="store_true", help="no authentication; refused unless --host is loopback"
    )
    server.add_argument(
        "--max-pending", type=whole_number("--max-pending"), metavar="N", default=defaults.MAX_PENDING,
        help="unfinished executions accepted before RunWorkflow answers RESOURCE_EXHAUSTED "
        f"(default {defaults.MAX_PENDING}); a hard cap: each tenant without its own max_pending "
        "holds at most a fair share of it (see flux tenant set --max-pending)",
    )  # fmt: skip
    server.add_argument(
        "--max-pending-bytes", type=quantity("--max-pending-bytes"), metavar="BYTES",
        default=defaults.MAX_PENDING_BYTES,
        help="input bytes of unfinished executions accepted before RunWorkflow answers RESOURCE_EXHAUSTED "
        f"(default {format_bytes(defaults.MAX_PENDING_BYTES)}); a hard cap, shared among tenants as "
        "--max-pending is",
    )  # fmt: skip
    server.add_argument(
        "--max-workers", type=whole_number("--max-workers"), metavar="N", default=defaults.MAX_WORKERS,
        help=f"registered workers before Register answers RESOURCE_EXHAUSTED (default {defaults.MAX_WORKERS})",
    )  # fmt: skip
    server.add_argument(
        "--max-worker-metadata", type=quantity("--max-worker-metadata"), metavar="BYTES",
        default=defaults.MAX_WORKER_METADATA,
        help="bytes of labels, packages, markers and GPU names one worker may advertise "
        f"(default {format_bytes(defaults.MAX_WORKER_METADATA)})",
    )  # fmt: skip
    with_http_limits(server)
    with_tls(server)
    server.add_argument(
        "--keda-port", type=whole_number("--keda-port"), default=None, metavar="PORT",
        help="serve KEDA's external scaler (ScaledObject trigger metadata: pool) on this port of --host, "
        "with --tls-cert/--tls-key when given (default: not served; 0 picks one)",
    )  # fmt: skip
    server.add_argument(
        "--keda-client-ca", metavar="PEM",
        help="require KEDA to present a client certificate signed by this CA (its tlsClientCert); needs "
        "--tls-cert. With --keda-port beyond a loopback --host, this or --keda-insecure is required",
    )  # fmt: skip
    server.add_argument(
        "--keda-insecure", action="store_true",
        help="serve --keda-port beyond a loopback --host without client certificates (anyone who reaches "
        "the port may call it, e.g. behind a NetworkPolicy); refused with --keda-client-ca",
    )  # fmt: skip
    server.add_argument(
        "--keda-max-streams", type=count("--keda-max-streams"), default=defaults.KEDA_MAX_STREAMS,
        metavar="N",
        help="open StreamIsActive streams (KEDA opens one per ScaledObject) before new ones get "
        f"RESOURCE_EXHAUSTED (default {defaults.KEDA_MAX_STREAMS})",
    )  # fmt: skip
    server.add_argument(
        "--keda-max-streams-per-peer", type=count("--keda-max-streams-per-peer"),
        default=defaults.KEDA_MAX_STREAMS_PER_PEER, metavar="N",
        help="open StreamIsActive streams from one client address before its new ones get "
        f"RESOURCE_EXHAUSTED (default {defaults.KEDA_MAX_STREAMS_PER_PEER})",
    )  # fmt: skip
    with_log_format(server)
    server.set_defaults(run=command("start", "start_server"))

    gateway = start.add_parser("gateway", help="run an extra HTTP/SSE gateway in front of a core")
    gateway.add_argument("--core", required=True, metavar="HOST:PORT", help="gRPC address of the core")
    gateway.add_argument("--host", default=defaults.HOST, help=f"address to bind (default {defaults.HOST})")
    gateway.add_argument(
        "--port", type=whole_number("--port"), default=defaults.HTTP_PORT,
        help=f"HTTP port (default {defaults.HTTP_PORT}; 0 picks one)",
    )  # fmt: skip
    with_ping_interval(gateway)
    gateway.add_argument("--ca", help="CA bundle (PEM) to verify the core's TLS certificate")
    with_cors(gateway)
    with_allowed_host(gateway)
    with_http_limits(gateway)
    with_tls(gateway)
    with_log_format(gateway)
    gateway.set_defaults(run=command("start", "start_gateway"))

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
        "--worker-token",
        help="join token (default $FLUX_WORKER_TOKEN, the file $FLUX_WORKER_TOKEN_FILE names, or "
        "./.flux/worker.token)",
    )
    worker.add_argument("--worker-token-file", help="read the join token from this file")
    worker.add_argument("--ca", help="CA bundle (PEM) to verify a TLS server (default $FLUX_CA)")
    worker.add_argument(
        "--label", action="append", type=label, default=[], metavar="KEY=VALUE",
        help="a label workflows can require with affinity; repeat for more",
    )  # fmt: skip
    worker.add_argument("--cpus", type=whole_number("--cpus"), help="cores to advertise")
    worker.add_argument("--memory", type=quantity("--memory"), help="memory to advertise, e.g. 8Gi")
    worker.add_argument("--gpus", type=whole_number("--gpus"), help="GPUs to offer (the first N)")
    worker.add_argument("--disk", type=quantity("--disk"), help="disk to advertise, e.g. 100Gi")
    worker.add_argument(
        "--disk-path",
        default=defaults.DISK_PATH,
        help=f"filesystem whose free space is reported (default {defaults.DISK_PATH})",
    )
    worker.add_argument(
        "--capacity",
        type=count("--capacity"),
        default=defaults.CAPACITY,
        help=f"concurrent executions (default {defaults.CAPACITY})",
    )
    worker.add_argument(
        "--advertise-address", default=os.environ.get("FLUX_ADVERTISE_ADDRESS", ""), metavar="HOST",
        help="the host (or host:port) other members of a gang reach this worker at, as ctx.gang.members "
        "shows it (default $FLUX_ADVERTISE_ADDRESS, else the address the server sees it connect from)",
    )  # fmt: skip
    worker.add_argument(
        "--prefetch", type=prefetch_count, default=defaults.PREFETCH, metavar="N",
        help="executions the server may queue here beyond this worker's room; each starts (and is "
        "claimed) when room allows, so no body runs beyond it. The server queues fewer while this "
        "worker's bodies run long (about 50 ms of them). GPU executions and those of a limited "
        f"key are never queued (0 to {defaults.MAX_PREFETCH}; default {defaults.PREFETCH})",
    )  # fmt: skip
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
        "--drain-timeout", type=seconds("--drain-timeout"), default=defaults.DRAIN_TIMEOUT, metavar="S",
        help="on SIGTERM, seconds to finish running executions before handing the rest back; keep it under "
        f"Kubernetes' terminationGracePeriodSeconds (default {defaults.DRAIN_TIMEOUT:g})",
    )  # fmt: skip
    worker.add_argument(
        "--health-port", type=whole_number("--health-port"), default=None, metavar="PORT",
        help="serve GET /healthz (200 while the worker answers) and GET /readyz (200 only while its dispatch "
        "stream is connected and it is not draining, else 503) on this port, for Kubernetes liveness and "
        "readiness probes (default: not served; 0 picks one)",
    )  # fmt: skip
    worker.add_argument(
        "--health-host", default=defaults.HOST, metavar="HOST",
        help=f"address --health-port binds (default {defaults.HOST}; in a pod 0.0.0.0, since the kubelet "
        "dials the pod's IP)",
    )  # fmt: skip
    with_log_format(worker)
    worker.set_defaults(run=command("start", "start_worker"))
