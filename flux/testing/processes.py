"""The process side of ``flux.testing``: starting a ``python -m flux`` process and reading what it prints.

Private: ``flux.testing`` re-exports the public names (``plain``, ``fake_site_packages``,
``LISTENING``, ``GATEWAY``), and users import them from there. Nothing here knows of
``Cluster``, so this module imports no other part of the harness.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

LISTENING = re.compile(r"listening on (\S+):(\d+) \(grpc\)")
GATEWAY = re.compile(r"^flux gateway listening on (https?://\S+)$")
# How long a restart waits for its old ports (see ``respawn``).
PORT_WAIT = 20.0


def plain(line: str) -> str:
    """A line a server printed, as text: in --log-format json it is an object whose ``msg`` is the text."""
    line = line.strip()
    if line.startswith("{"):
        try:
            return str(json.loads(line).get("msg", line))
        except ValueError:
            pass
    return line


def fake_site_packages(directory: Path, packages: dict[str, str]) -> Path:
    """A folder of ``*.dist-info`` stubs: on PYTHONPATH, importlib.metadata sees these versions."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, version in packages.items():
        info = directory / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return directory


# argv: the limit, then the command's arguments after the interpreter; the pid stays the same.
_WITH_OPEN_FILES = (
    "import os, resource, sys; limit = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)


def spawn(
    workdir: Path,
    args: list[str],
    env: dict[str, str] | None,
    log: str,
    server_open_files: int | None,
) -> subprocess.Popen[str]:
    """``python -m flux *args`` in ``workdir``, its stderr appended to ``workdir/<log>.log``.

    A server, replica or gateway (by ``log``'s prefix) keeps stdout as a pipe, where it prints
    the ports it bound; a server or replica starts with at most ``server_open_files`` open files,
    set by a launcher that then execs it. Not by a ``preexec_fn``: that runs this process's
    after-fork handlers in the child, and gRPC's (a test process holds channels) restarted a poller
    thread there that died on a descriptor the child had closed ("epoll_wait error: Bad file
    descriptor"), before the exec (grpc/grpc#43055).
    """
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    handle = open(workdir / f"{log}.log", "a")  # noqa: SIM115 - lives as long as the process
    launcher: list[str] = []
    if server_open_files is not None and log.startswith(("server", "replica")):
        launcher = ["-c", _WITH_OPEN_FILES, str(server_open_files)]
    return subprocess.Popen(
        [sys.executable, *launcher, "-m", "flux", *args],
        cwd=workdir,
        env=environment,
        stdout=subprocess.PIPE if log.startswith(("server", "replica", "gateway")) else handle,
        stderr=handle,
        text=True,
    )


def read_gateway_line(process: subprocess.Popen[str], what: str, workdir: Path) -> str:
    """The gateway URL ``process`` printed next on stdout; kill it and fail if it printed something else."""
    assert process.stdout is not None
    line = process.stdout.readline()
    match = GATEWAY.match(plain(line))
    if not match:
        process.kill()
        raise AssertionError(f"{what} did not start: {line!r}; see the logs in {workdir}")
    return match.group(1)


def respawn(start: Callable[[], subprocess.Popen[str]], log: Path) -> tuple[subprocess.Popen[str], str]:
    """Start a server again on the ports it had (``start``); the process and its first line.

    The kernel hands a killed server's port out again: on a busy machine another process's
    outgoing connection or port-0 bind may hold it for a moment. Workers keep the address, so
    while the server says its port "is already in use" (in ``log``), it is started again, for up
    to ``PORT_WAIT`` seconds; any other failure comes back at once, as does the last one.
    """
    deadline = time.monotonic() + PORT_WAIT
    while True:
        seen = log.stat().st_size if log.exists() else 0
        process = start()
        assert process.stdout is not None
        line = process.stdout.readline()
        if LISTENING.search(plain(line)):
            return process, line
        process.kill()
        process.wait(timeout=10)
        with log.open("rb") as handle:
            handle.seek(seen)
            taken = b"is already in use" in handle.read()
        if not taken or time.monotonic() > deadline:
            return process, line
        time.sleep(0.25)
