"""A local cluster of real processes on 127.0.0.1: a server, workers, and a client.

Used by the integration tests and the benchmarks, and handy for trying Flux out.

The server binds port 0 and prints the port it got; we read it from its first
stdout line, never guessing a free port. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from flux.client import FluxClient
from flux.v1 import control_pb2

T = TypeVar("T")

LISTENING = re.compile(r"listening on (\S+):(\d+) \(grpc\)")


def eventually(
    check: Callable[[], T | None], timeout: float = 15.0, interval: float = 0.05, what: str = ""
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(interval)


def fake_site_packages(directory: Path, packages: dict[str, str]) -> Path:
    """A folder of ``*.dist-info`` stubs: on PYTHONPATH, importlib.metadata sees these versions."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, version in packages.items():
        info = directory / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return directory


class Cluster:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.processes: list[subprocess.Popen[str]] = []
        self.address = ""
        self.server: subprocess.Popen[str] | None = None
        self._client: FluxClient | None = None

    # ------------------------------------------------------------- processes

    def _spawn(
        self, args: list[str], env: dict[str, str] | None = None, log: str = "proc"
    ) -> subprocess.Popen[str]:
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        handle = open(self.workdir / f"{log}.log", "a")  # noqa: SIM115 - lives as long as the process
        process = subprocess.Popen(
            [sys.executable, "-m", "flux", *args],
            cwd=self.workdir,
            env=environment,
            stdout=subprocess.PIPE if log == "server" else handle,
            stderr=handle,
            text=True,
        )
        self.processes.append(process)
        return process

    def start_server(self, *args: str, db: str = "flux.db") -> str:
        process = self._spawn(
            ["start", "server", "--grpc-port", "0", "--db", str(self.workdir / db), *args], log="server"
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        match = LISTENING.search(line)
        if not match:
            process.kill()
            raise AssertionError(f"server did not start: {line!r}; see {self.workdir / 'server.log'}")
        self.server = process
        self.address = f"{match.group(1)}:{match.group(2)}"
        if self._client is not None:
            self._client.close()
            self._client = None
        return self.address

    def restart_server(self, *args: str, port: int | None = None, db: str = "flux.db") -> str:
        """Start a server on the same port (workers keep their --server address)."""
        port = port or int(self.address.rsplit(":", 1)[1])
        process = self._spawn(
            ["start", "server", "--grpc-port", str(port), "--db", str(self.workdir / db), *args], log="server"
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        assert LISTENING.search(line), f"server did not restart: {line!r}"
        self.server = process
        return self.address

    def kill_server(self) -> None:
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
    ) -> subprocess.Popen[str]:
        env: dict[str, str] = {}
        if packages is not None:
            site = fake_site_packages(self.workdir / f"site-{name}", packages)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
        if gpus is not None:
            env["FLUX_SIMULATED_GPUS"] = gpus
        process = self._spawn(
            [
                "start",
                "worker",
                name,
                "--server",
                self.address,
                "--work-dir",
                str(self.workdir / "work"),
                *args,
            ],
            env=env,
            log=f"worker-{name}",
        )
        if wait:
            eventually(lambda: self.worker_connected(name), what=f"worker {name} to connect")
        return process

    def worker_connected(self, name: str) -> bool:
        return any(w.name == name and w.connected for w in self.client.workers().workers)

    def close(self) -> None:
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

    @property
    def client(self) -> FluxClient:
        if self._client is None:
            self._client = FluxClient(self.address, timeout=10)
        return self._client

    def register(self, path: Path) -> None:
        self.client.register_file(path)

    def run(
        self, workflow: str, value: object = None, wait: bool = True, timeout: float = 30
    ) -> control_pb2.Execution:
        return self.client.run(workflow, value, wait=wait, timeout=timeout)

    def wait_all(self, ids: Iterable[str], timeout: float = 60) -> list[control_pb2.Execution]:
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
