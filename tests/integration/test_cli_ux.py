"""What a user meets at the ``flux`` command: refusals, waiting, input, help; real processes only."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from flux.auth import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2

pytestmark = pytest.mark.integration

CREATED = control_pb2.EXECUTION_STATE_CREATED
EXIT_TIMED_OUT = 3


def _without_tokens() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLUX_WORKER_TOKEN", "FLUX_API_TOKEN")}
    return {**env, "PYTHONUNBUFFERED": "1"}


# ---------------------------------------------------------------- item 1: refused workers exit


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        pytest.param(None, "missing credentials", id="no token"),
        pytest.param("not-the-token", "invalid worker token", id="wrong token"),
        pytest.param("api", "the api token cannot call", id="the API token instead of the worker token"),
    ],
)
def test_a_refused_worker_exits_at_once_saying_what_to_do(
    cluster: Cluster, transport: str, tmp_path: Path, token: str | None, expected: str
) -> None:
    # Started away from the server's directory, so ./.flux/worker.token is not found there.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = ["--gateway", cluster.gateway_url] if transport == "sse" else ["--server", cluster.address]
    given = (
        [] if token is None else ["--worker-token", cluster.token(Role.CLIENT) if token == "api" else token]
    )
    result = subprocess.run(
        [sys.executable, "-m", "flux", "start", "worker", "intruder", *where, *given],
        cwd=elsewhere, env=_without_tokens(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("error: refused by the server: ")
    assert expected in errors[0]
    assert "--worker-token-file" in errors[0] and "FLUX_WORKER_TOKEN" in errors[0]
    assert "./.flux/worker.token" in errors[0]
    assert "reconnecting" not in result.stderr  # refused for good: no retry
    assert "intruder" not in {w.name for w in cluster.client.workers().workers}


@pytest.mark.transports("grpc")
def test_an_unreachable_server_is_retried_not_refused(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "unreachable.log"
    with open(log, "w") as handle:
        worker = subprocess.Popen(
            # Port 1 on loopback: nothing listens there, the connection is refused at once.
            [sys.executable, "-m", "flux", "start", "worker", "patient", "--server", "127.0.0.1:1"],
            cwd=cluster.workdir, env=_without_tokens(), stdout=handle, stderr=handle, text=True,
        )  # fmt: skip
    try:
        eventually(lambda: log.read_text().count("reconnecting in") >= 2, timeout=30, what="two retries")
        assert worker.poll() is None
    finally:
        worker.kill()
        worker.wait(timeout=10)


# ---------------------------------------------------------------- item 2: --wait --timeout


@pytest.mark.transports("grpc")
def test_wait_timeout_names_the_execution_and_its_state_with_its_own_exit_code(cluster: Cluster) -> None:
    # No worker is connected: the execution stays CREATED, the server answers all along.
    result = cluster.flux("workflow", "run", "echo", '"x"', "--wait", "--timeout", "2")
    assert result.returncode == EXIT_TIMED_OUT, result.stderr
    assert result.stdout == ""
    match = re.fullmatch(
        r"timed out after 2s; execution (\S+) is still CREATED — flux execution explain \1\n", result.stderr
    )
    assert match, result.stderr
    assert "cannot reach" not in result.stderr
    assert cluster.client.get(match.group(1)).state == CREATED


@pytest.mark.transports("grpc")
def test_exit_codes_are_documented_in_help(cluster: Cluster) -> None:
    result = cluster.flux("workflow", "run", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "3 --wait --timeout expired" in text and "130 Ctrl-C" in text
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "--timeout" in readme and "exit status 3" in readme


# ---------------------------------------------------------------- item 10: input from files and stdin


@pytest.mark.transports("grpc")
def test_large_input_from_a_file_and_from_stdin(cluster: Cluster) -> None:
    cluster.start_worker("w")
    big = {"rows": ["x" * 100] * 2000}  # about 200 KB: too long for one argument on many systems
    path = cluster.workdir / "input.json"
    path.write_text(json.dumps(big))
    assert len(path.read_bytes()) > 200_000
    from_file = cluster.flux("workflow", "run", "echo", "--input-file", str(path), "--wait")
    assert from_file.returncode == 0, from_file.stderr
    assert json.loads(from_file.stdout)["input"] == big
    from_stdin = subprocess.run(
        [sys.executable, "-m", "flux", "workflow", "run", "echo", "-", "--wait"],
        input=json.dumps(big), cwd=cluster.workdir, env={**os.environ, "FLUX_SERVER": cluster.address},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert json.loads(from_stdin.stdout)["input"] == big
    assert from_stdin.stderr == ""  # stderr is not a terminal: no progress line


@pytest.mark.transports("grpc")
@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["1", "--input-file", "x.json"], 2, "give the input once", id="two sources"),
        pytest.param(["--input-file", "missing.json"], 2, "--input-file 'missing.json' cannot be read", id="no file"),
        pytest.param(["--input-file", "bad.json"], 1, "--input-file bad.json is not valid JSON", id="bad JSON"),
    ],
)  # fmt: skip
def test_bad_input_sources_are_named(cluster: Cluster, args: list[str], code: int, message: str) -> None:
    (cluster.workdir / "bad.json").write_text("{not json")
    result = cluster.flux("workflow", "run", "echo", *args)
    assert result.returncode == code
    assert message in result.stderr


# ---------------------------------------------------------------- item 11: progress while waiting


def _read_until(fd: int, pattern: str, seen: bytearray, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, seen.decode(errors="replace")):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {pattern!r} on the terminal; got {seen.decode(errors='replace')!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the other side closed
                chunk = b""
            if not chunk:
                break
            seen += chunk
    return seen.decode(errors="replace")


@pytest.mark.transports("grpc")
def test_wait_on_a_terminal_shows_a_live_line_and_ctrl_c_leaves_the_execution(cluster: Cluster) -> None:
    cluster.start_worker("small", "--cpus", "2")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    process = subprocess.Popen(
        [sys.executable, "-m", "flux", "workflow", "run", "needs_cpu_8", "--wait"],
        cwd=cluster.workdir, env={**env, "FLUX_SERVER": cluster.address},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    seen = bytearray()
    try:
        # The line names the state and why it waits, and is redrawn in place (erase, then draw).
        screen = _read_until(master, r"CREATED · \d+s · 0/1 workers can run it: 1 has", seen)
        assert "\x1b[2K" in screen and "\n" not in screen
        _read_until(master, r"CREATED · [1-9]\d*s", seen)  # the elapsed time moves
        process.send_signal(signal.SIGINT)
        screen = _read_until(master, r"flux workflow cancel \S+", seen)
        assert process.wait(timeout=30) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        os.close(master)
    match = re.search(
        r"stopped waiting; execution (\S+) is left CREATED — cancel it with: flux workflow cancel \1", screen
    )
    assert match, screen
    assert process.stdout is not None and process.stdout.read() == b""
    # Left as it was: still queued, not cancelled.
    assert cluster.client.get(match.group(1)).state == CREATED


@pytest.mark.transports("grpc")
def test_wait_without_a_terminal_prints_only_the_output(cluster: Cluster) -> None:
    cluster.start_worker("w")
    result = cluster.flux("workflow", "run", "echo", '"quiet"', "--wait")
    assert result.returncode == 0
    assert json.loads(result.stdout) == {"input": "quiet", "worker": "w"}
    assert result.stderr == ""
