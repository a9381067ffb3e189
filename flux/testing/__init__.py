"""Flux's public testing API: a local cluster of real processes on 127.0.0.1.

``Cluster`` starts a server (or several replicas), workers and a client, as
``temporalio.testing`` starts a test server; ``eventually`` is a bounded wait.
Flux's own integration tests and benchmarks use exactly this, and so can the
tests of a project that writes workflows::

    with contextlib.closing(Cluster(tmp_path)) as cluster:
        cluster.start_server()
        cluster.register(Path("workflows.py"))
        cluster.start_worker("w1")
        assert cluster.run("hello", "world").state == control_pb2.EXECUTION_STATE_COMPLETED

``flux.testing.postgres.TemporaryPostgres`` adds a throwaway PostgreSQL for
replica tests. Both are part of the Python API: changes to them are additive.
``KedaEmulator`` (``keda``) replays KEDA's calls to the external scaler, and
``chromium_path`` (``browser``) finds a headless browser for the dashboard's tests.
The package's modules are its own; import from here (``postgres`` loads psycopg, so it
is imported by its name, not from here).

The server binds port 0 and prints the ports it got (gRPC on its first stdout
line, the HTTP/SSE gateway on the second); we read them back, never guessing a
free port. Workers reach the server over ``transport``: "grpc" dials the core,
"sse" goes through the gateway. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import grpc

from flux.client import FluxClient
from flux.security import Credentials, Role, caller_token

# Spawning processes and reading their output lives in flux.testing.processes (private); its
# public names are re-exported here, where users import them.
from flux.testing.browser import CHROMIUM_ARGS, chromium_path
from flux.testing.keda import KedaEmulator
from flux.testing.processes import (
    GATEWAY,
    LISTENING,
    fake_site_packages,
    plain,
    read_gateway_line,
    respawn,
    spawn,
)
from flux.v1 import control_pb2

__all__ = [
    "CHROMIUM_ARGS", "GATEWAY", "LISTENING", "TRANSPORTS", "Cluster", "KedaEmulator", "chromium_path",
    "eventually", "plain", "read_gateway_line", "spawn",
]  # fmt: skip

T = TypeVar("T")

TRANSPORTS = ("grpc", "sse")


def eventually(
    check: Callable[[], T | None],
    timeout: float = 15.0,
    interval: float = 0.05,
    what: str | Callable[[], str] = "",
) -> T:
    """Call ``check`` every ``interval`` seconds until it returns something true, and return that.

    Past ``timeout`` seconds, fail with an AssertionError that names ``what`` is awaited.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {described or check}")
        time.sleep(interval)


class Cluster:
    """Real Flux processes under ``workdir``: ``start_server`` first, then workers and clients.

    ``transport`` is how workers reach the server ("grpc", or "sse" through the
    gateway); ``db`` is a SQLite path under ``workdir`` or a PostgreSQL URL.
    Tokens and a TLS CA are made per cluster. ``close`` stops every process.
    """

    def __init__(self, workdir: Path, transport: str = "grpc", db: str = "flux.db"):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}; got {transport!r}")
        self.workdir = workdir
        self.transport = transport
        self.processes: list[subprocess.Popen[str]] = []
        self.address = ""
        self.gateway_url = ""
        # CA bundle when the server runs TLS (tests set it with the server's --tls-cert).
        self.ca: str | None = None
        self.server: subprocess.Popen[str] | None = None
        # A SQLite file under workdir, or a postgresql:// URL that every replica shares.
        self.db = db
        # Further servers on the same PostgreSQL database: (process, gRPC address, gateway URL).
        self.replicas: list[tuple[subprocess.Popen[str], str, str]] = []
        self._client: FluxClient | None = None
        # The open-file limit each server process starts with (None: this process's).
        self.server_open_files: int | None = None

    # ------------------------------------------------------------- processes

    def _spawn(
        self, args: list[str], env: dict[str, str] | None = None, log: str = "proc"
    ) -> subprocess.Popen[str]:
        process = spawn(self.workdir, args, env, log, self.server_open_files)
        self.processes.append(process)  # for close()
        return process

    def _read_gateway_line(self, process: subprocess.Popen[str], what: str) -> str:
        return read_gateway_line(process, what, self.workdir)

    def _db_arg(self, db: str | None) -> str:
        db = db or self.db
        return db if "://" in db else str(self.workdir / db)

    def _start_server_process(
        self, args: tuple[str, ...], db: str | None, log: str
    ) -> tuple[subprocess.Popen[str], str, str]:
        http = [] if "--no-http" in args else ["--http-port", "0"]
        process = self._spawn(
            ["start", "server", "--grpc-port", "0", *http, "--db", self._db_arg(db), *args], log=log
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        match = LISTENING.search(plain(line))
        if not match:
            process.kill()
            raise AssertionError(f"server did not start: {line!r}; see {self.workdir / (log + '.log')}")
        gateway = self._read_gateway_line(process, "gateway") if http else ""
        return process, f"{match.group(1)}:{match.group(2)}", gateway

    def start_server(self, *args: str, db: str | None = None) -> str:
        """Start ``flux start server`` with extra ``args``; return its gRPC address."""
        self.server, self.address, self.gateway_url = self._start_server_process(args, db, "server")
        if self._client is not None:
            self._client.close()
            self._client = None
        return self.address

    def start_replica(self, *args: str) -> str:
        """One more server on this cluster's PostgreSQL database; returns its gRPC address."""
        assert "://" in self.db, "replicas share a PostgreSQL database: build the Cluster with db=URL"
        replica = self._start_server_process(args, None, f"replica-{len(self.replicas) + 1}")
        self.replicas.append(replica)
        return replica[1]

    def query(self, sql: str, *params: object) -> list[tuple]:  # type: ignore[type-arg]
        """Rows from the cluster's store, SQLite or PostgreSQL (write ``?`` placeholders)."""
        if "://" in self.db:
            import psycopg

            with psycopg.connect(self.db) as db:
                return [tuple(row) for row in db.execute(sql.replace("?", "%s"), params).fetchall()]
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.workdir / self.db)) as db:
            return db.execute(sql, params).fetchall()

    def execute(self, sql: str, *params: object) -> None:
        """Change the cluster's store behind the server's back (a fault to recover from)."""
        if "://" in self.db:
            import psycopg

            with psycopg.connect(self.db) as db:
                db.execute(sql.replace("?", "%s"), params)
            return
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.workdir / self.db)) as db, db:
            db.execute(sql, params)

    def client_for(self, address: str) -> FluxClient:
        """A client of one particular server (replica); the caller closes it."""
        return FluxClient(address, timeout=10, credentials=self.credentials(Role.CLIENT))

    def restart_server(self, *args: str, port: int | None = None, db: str | None = None) -> str:
        """Start a server on the same ports (workers keep their --server or --gateway address)."""
        port = port or int(self.address.rsplit(":", 1)[1])
        self.server = self._restart("server", port, self.gateway_url, db, args)
        return self.address

    def restart_replica(self, index: int, *args: str) -> str:
        """Start replica ``index`` (0 is the first ``start_replica``) again on its gRPC and HTTP ports.

        Like ``restart_server``: workers keep their addresses. Kill it first (it is not stopped here).
        """
        _, address, gateway = self.replicas[index]
        process = self._restart(f"replica-{index + 1}", int(address.rsplit(":", 1)[1]), gateway, None, args)
        self.replicas[index] = (process, address, gateway)
        return address

    def _restart(
        self, log: str, port: int, gateway: str, db: str | None, args: tuple[str, ...]
    ) -> subprocess.Popen[str]:
        """A server started again on gRPC ``port`` and ``gateway``'s port (none: --no-http)."""
        http = ["--http-port", gateway.rsplit(":", 1)[1]] if gateway else ["--no-http"]
        command = ["start", "server", "--grpc-port", str(port), *http, "--db", self._db_arg(db), *args]
        path = self.workdir / f"{log}.log"
        process, line = respawn(lambda: self._spawn(command, log=log), path)
        if not LISTENING.search(plain(line)):
            raise AssertionError(f"{log} did not restart: {line!r}; see {path}")
        if gateway:
            assert self._read_gateway_line(process, "gateway") == gateway
        return process

    def start_gateway(self, *args: str) -> tuple[subprocess.Popen[str], str]:
        """An extra gateway process in front of this cluster's core; returns it and its URL."""
        process = self._spawn(
            ["start", "gateway", "--core", self.address, "--port", "0", *args], log="gateway"
        )
        return process, self._read_gateway_line(process, "gateway")

    def kill_server(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed or announced)."""
        assert self.server is not None
        self.server.send_signal(signal.SIGKILL)
        self.server.wait(timeout=10)

    def start_worker(
        self,
        name: str,
        *args: str,
        packages: dict[str, str] | None = None,
        gpus: str | None = None,
        wait: bool = True,
        gateway: str | None = None,
        servers: Iterable[str] = (),
        gateways: Iterable[str] = (),
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """A worker process; over the cluster's transport, or through ``gateway`` (a URL) when given.

        ``servers`` lists gRPC addresses to use in turn (replicas); the default is the cluster's server.
        ``gateways`` lists gateway URLs to use in turn, as ``gateway`` gives one; ``env`` adds
        environment variables (e.g. ``FLUX_SIMULATED_CPU_BUSY``).
        """
        env = dict(env or {})
        if packages is not None:
            site = fake_site_packages(self.workdir / f"site-{name}", packages)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
        if gpus is not None:
            env["FLUX_SIMULATED_GPUS"] = gpus
        gateways = list(gateways)
        if gateway is None and not gateways and self.transport == "sse":
            assert self.gateway_url, "an SSE cluster needs its server's gateway (no --no-http)"
            gateway = self.gateway_url
        addresses = list(servers) or [self.address]
        urls = [gateway] if gateway else list(gateways)
        where = [a for url in urls for a in ("--gateway", url)] or [
            a for address in addresses for a in ("--server", address)
        ]
        process = self._spawn(
            [
                "start",
                "worker",
                name,
                *where,
                "--work-dir",
                str(self.workdir / "work"),
                *args,
            ],
            env=env,
            log=f"worker-{name}",
        )
        if wait:
            with self.client_for(addresses[0]) as client:
                eventually(
                    lambda: any(w.name == name and w.connected for w in client.workers().workers),
                    what=f"worker {name} to connect",
                )
        return process

    def worker_connected(self, name: str) -> bool:
        """Whether the server lists worker ``name`` as connected now."""
        return any(w.name == name and w.connected for w in self.client.workers().workers)

    def close(self) -> None:
        """Stop every process this cluster started, workers first."""
        if self._client is not None:
            self._client.close()
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()

    # ------------------------------------------------------------- client

    def token(self, role: Role) -> str:
        """The server's token for ``role``: it generated them under its working directory's ./.flux/."""
        return caller_token(role, state_dir=self.workdir / ".flux")

    def credentials(self, role: Role) -> Credentials:
        """The token of ``role`` and the cluster's CA, as a client passes them."""
        return Credentials(self.token(role), self.ca)

    def channel(self, role: Role, address: str | None = None) -> grpc.Channel:
        """A raw channel whose every call carries ``role``'s token, for tests that speak protobuf directly.

        It dials the cluster's server, or ``address`` (a replica) when given.
        """
        credentials = self.credentials(role)
        channel = credentials.channel(address or self.address)
        return grpc.intercept_channel(channel, _Metadata(credentials.metadata))

    @property
    def client(self) -> FluxClient:
        if self._client is None:
            self._client = FluxClient(self.address, timeout=10, credentials=self.credentials(Role.CLIENT))
        return self._client

    def register(self, path: Path) -> None:
        """Register the workflows defined in the Python file ``path``."""
        self.client.register_file(path)

    def run(
        self, workflow: str, value: object = None, wait: bool = True, timeout: float = 30
    ) -> control_pb2.Execution:
        """Submit ``workflow`` with input ``value``; with ``wait``, return its final state."""
        return self.client.run(workflow, value, wait=wait, timeout=timeout)

    def wait_all(self, ids: Iterable[str], timeout: float = 60) -> list[control_pb2.Execution]:
        """The final state of each execution, in order, each waited for up to ``timeout`` seconds."""
        return [self.client.wait(i, timeout) for i in ids]

    def flux(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run the CLI as a user would."""
        return subprocess.run(
            [sys.executable, "-m", "flux", *args],
            cwd=self.workdir,
            env={**os.environ, "FLUX_SERVER": self.address},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


class _Metadata(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds fixed metadata (the bearer token) to every call on a sync channel."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]):
        self.metadata = metadata

    def _with(self, details):  # type: ignore[no-untyped-def]
        return details._replace(metadata=(*(details.metadata or ()), *self.metadata))

    def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._with(details), request)

    def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._with(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):  # type: ignore[no-untyped-def]
        return continuation(self._with(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):  # type: ignore[no-untyped-def]
        return continuation(self._with(details), request_iterator)
