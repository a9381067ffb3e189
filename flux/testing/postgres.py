"""A throwaway PostgreSQL server for tests and benchmarks: initdb in a temp dir, loopback only.

Part of Flux's public testing API (with ``flux.testing``): use it as a context
manager, and give each test its own ``database()``.

Set ``FLUX_TEST_POSTGRES_URL`` (a server URL whose user may create databases)
to use a running server instead. The binaries are found on PATH or in the
Debian layout (``/usr/lib/postgresql/*/bin``). PostgreSQL refuses to run as
root, so under root the cluster is created and run as the ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

ENV_URL = "FLUX_TEST_POSTGRES_URL"


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise RuntimeError(
            f"PostgreSQL's {name} was not found on PATH or in /usr/lib/postgresql/*/bin; install the "
            f"PostgreSQL server (Debian: postgresql) or set {ENV_URL} to a server the tests may use"
        )
    return found


def _free_port() -> int:
    # PostgreSQL cannot bind port 0 and report it, so take one the kernel just handed out.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TemporaryPostgres:
    """One PostgreSQL server for a test session: ``with TemporaryPostgres() as pg: url = pg.database()``."""

    def __init__(self, durable: bool = False) -> None:
        # Tests skip fsync (speed, and nothing outlives them); benchmarks keep PostgreSQL's defaults.
        self.durable = durable
        self.url = os.environ.get(ENV_URL, "")
        self._directory: Path | None = None
        self._as: list[str] = []
        self._options = ""  # pg_ctl's -o for this server: its port and settings, reused by resume()

    def __enter__(self) -> TemporaryPostgres:
        if not self.url:
            self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args[:2])} failed: {result.stderr.strip() or result.stdout.strip()}"
            )

    def _start(self) -> None:
        initdb = _binary("initdb")
        _binary("pg_ctl")  # missing, it fails here, before anything is created
        self._directory = Path(tempfile.mkdtemp(prefix="flux-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self._directory, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        data = self._directory / "data"
        self._run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        for _ in range(5):
            port = _free_port()
            options = f"-h 127.0.0.1 -p {port} -k {self._directory} -c max_connections=300"
            if not self.durable:
                options += " -c fsync=off"
            try:
                self._pg_ctl_start(options)
            except RuntimeError:
                continue  # the port was taken in between; try another
            self._options = options
            self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
            return
        raise RuntimeError(f"PostgreSQL did not start; see {self._directory / 'log'}")

    def _pg_ctl_start(self, options: str) -> None:
        assert self._directory is not None
        data, log = self._directory / "data", self._directory / "log"
        self._run(_binary("pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start")

    def _own(self, what: str) -> Path:
        if self._directory is None:
            raise RuntimeError(f"{what} needs a server this object started, not {ENV_URL}'s")
        return self._directory

    def pause(self) -> None:
        """Stop the server as an administrator restarting it would, keeping its data (and port).

        Sessions are ended with ``AdminShutdown`` and new connections refused until ``resume``.
        """
        data = self._own("pause") / "data"
        self._run(_binary("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start a paused server again on the same port, with the same data."""
        self._own("resume")
        self._pg_ctl_start(self._options)

    def database(self) -> str:
        """A fresh, empty database on this server; returns its URL."""
        name = f"flux_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        base, _, _ = self.url.rpartition("/")
        return f"{base}/{name}"

    def stop(self) -> None:
        """Stop the server and delete its files (nothing if it was never started or is external)."""
        if self._directory is None:
            return
        data = self._directory / "data"
        subprocess.run([*self._as, _binary("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(self._directory, ignore_errors=True)
        self._directory = None
