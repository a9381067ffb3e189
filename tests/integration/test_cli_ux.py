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
import threading
import time
from pathlib import Path

import pytest

from flux.security import Role
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


def test_a_worker_refused_for_an_invalid_value_exits_naming_it(cluster: Cluster, transport: str) -> None:
    worker = cluster.start_worker("bad name!", wait=False)
    assert worker.wait(timeout=60) == 1
    log = (cluster.workdir / "worker-bad name!.log").read_text()
    [error] = [line for line in log.splitlines() if line.startswith("error:")]
    assert error.startswith("error: refused by the server: name 'bad name!' is invalid; a worker name is")
    assert error.endswith("fix the value it names and start the worker again")


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
    reference = (Path(__file__).parents[2] / "docs" / "reference" / "cli.md").read_text()
    assert "--timeout" in reference and "exit status 3" in reference


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


# SIGINT as a shell leaves it for a foreground job: handled. A test runner that ignores it
# (pytest-xdist's workers, a job started with `&` by a script) passes SIG_IGN on, and Python then
# keeps ignoring Ctrl-C rather than raising KeyboardInterrupt. So the CLI is started by a launcher
# that restores it and execs, not by a preexec_fn: a preexec_fn runs this process's after-fork
# handlers in the child, and gRPC's (this test process holds channels) then polled a descriptor
# the child closed, printing "epoll_wait error: Bad file descriptor" onto the terminal under test.
AS_A_TERMINAL_STARTS_IT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


@pytest.mark.transports("grpc")
def test_wait_on_a_terminal_shows_a_live_line_and_ctrl_c_leaves_the_execution(cluster: Cluster) -> None:
    cluster.start_worker("small", "--cpus", "2")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    process = subprocess.Popen(
        [sys.executable, "-c", AS_A_TERMINAL_STARTS_IT, "-m", "flux", "workflow", "run", "needs_cpu_8", "--wait"],
        cwd=cluster.workdir, env={**env, "FLUX_SERVER": cluster.address},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    seen = bytearray()
    try:
        # The line names the state and why it waits, and is redrawn in place (erase, then draw).
        screen = _read_until(master, r"CREATED · \d+s · next in line · 0/1 workers can run it: 1 has", seen)
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


# ---------------------------------------------------------------- item 13: help and polish


def test_flux_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    result = subprocess.run(
        [sys.executable, "-m", "flux", "--version"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0
    assert result.stdout.strip() == f"flux {version('flux-dispatch')}"


@pytest.mark.transports("grpc")
def test_a_mistyped_workflow_name_gets_a_suggestion(cluster: Cluster) -> None:
    result = cluster.flux("workflow", "run", "ecoh", '"x"')
    assert result.returncode == 1
    assert "workflow 'ecoh' is not registered; did you mean 'echo'?" in result.stderr


@pytest.mark.transports("grpc")
def test_a_failure_traceback_names_the_users_file(cluster: Cluster) -> None:
    cluster.start_worker("w")
    result = cluster.flux("workflow", "run", "boom", '"bad"', "--wait")
    assert result.returncode == 1
    assert "error: RuntimeError: boom: bad" in result.stderr
    assert re.search(r'File "[^"]*/workflows\.py", line \d+, in boom', result.stderr), result.stderr
    assert 'raise RuntimeError(f"boom: {ctx.input}")' in result.stderr  # the line itself is shown
    assert not re.search(r"code/[0-9a-f]{64}\.py", result.stderr)


def test_a_tls_server_reached_without_ca_says_to_pass_it(tmp_path: Path) -> None:
    from tests.integration.tls import make_pki

    pki = make_pki(tmp_path / "pki")
    (tmp_path / "cluster").mkdir()
    cluster = Cluster(tmp_path / "cluster")
    cluster.ca = str(pki.ca)
    try:
        cluster.start_server("--tls-cert", str(pki.cert), "--tls-key", str(pki.key), "--no-http")
        env = {k: v for k, v in os.environ.items() if k != "FLUX_CA"}
        result = subprocess.run(
            [sys.executable, "-m", "flux", "workers", "list", "--server", cluster.address],
            cwd=cluster.workdir, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 1
        assert "it looks like a TLS server: pass its CA bundle with --ca" in result.stderr
        with_ca = cluster.flux("workers", "list", "--ca", str(pki.ca))
        assert with_ca.returncode == 0, with_ca.stderr
        # A worker retries (the server may come back), but its warning says what to do.
        worker = subprocess.Popen(
            [sys.executable, "-m", "flux", "start", "worker", "w", "--server", cluster.address],
            cwd=cluster.workdir, env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            seen = _stderr_until(worker, "it looks like a TLS server: pass its CA bundle with --ca")
            assert "control plane unavailable" in seen
        finally:
            worker.kill()
            worker.wait(timeout=10)
    finally:
        cluster.close()


def _stderr_until(process: subprocess.Popen[str], text: str, timeout: float = 60.0) -> str:
    """The process's stderr up to the first line holding ``text``; fails after ``timeout`` seconds."""
    assert process.stderr is not None
    lines: list[str] = []
    timer = threading.Timer(timeout, process.kill)  # a read blocks; killing the process ends it
    timer.start()
    try:
        for line in process.stderr:
            lines.append(line)
            if text in line:
                return "".join(lines)
    finally:
        timer.cancel()
    raise AssertionError(f"{text!r} never appeared on stderr:\n{''.join(lines)}")


def test_insecure_off_loopback_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flux", "start", "server", "--insecure", "--host", "0.0.0.0",
         "--grpc-port", "0", "--http-port", "0"],
        cwd=tmp_path, env=_without_tokens(), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == (
        "error: --insecure is refused on 0.0.0.0: without auth the server binds to loopback only\n"
    )
    assert list(tmp_path.iterdir()) == []  # no ./.flux/, no database, no token


def _json_lines(text: str, what: str) -> list[dict]:
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            raise AssertionError(f"a line of {what} is not JSON: {line!r}") from None
    return [json.loads(line) for line in lines]


def test_with_log_format_json_every_line_is_json(tmp_path: Path) -> None:
    """The server's printed lines (ports, generated tokens), uvicorn's, the worker's: all JSON."""
    env = {**_without_tokens(), "FLUX_LOG_FORMAT": "text"}
    server = subprocess.Popen(
        [sys.executable, "-m", "flux", "start", "server", "--log-format", "json", "--grpc-port", "0",
         "--http-port", "0"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = None
    try:
        assert server.stdout is not None
        grpc_line, http_line = json.loads(server.stdout.readline()), json.loads(server.stdout.readline())
        address, url = grpc_line["grpc"], http_line["http"]
        assert grpc_line["msg"].startswith("flux server listening on") and url.startswith("http://")
        worker = subprocess.Popen(
            [sys.executable, "-m", "flux", "start", "worker", "j", "--gateway", url, "--log-format", "json"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        run = subprocess.run(
            [sys.executable, "-m", "flux", "workflow", "register", str(Path(__file__).with_name("workflows.py"))],
            cwd=tmp_path, env={**env, "FLUX_SERVER": address}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        run = subprocess.run(
            [sys.executable, "-m", "flux", "workflow", "run", "echo", "1", "--wait", "--timeout", "60"],
            cwd=tmp_path, env={**env, "FLUX_SERVER": address}, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
    finally:
        for process in (worker, server):
            if process is not None:
                process.send_signal(signal.SIGINT)
        for process in (worker, server):
            if process is not None:
                process.wait(timeout=30)
    server_out, server_err = server.communicate(timeout=10)
    records = _json_lines(server_err, "the server's stderr") + _json_lines(server_out, "the server's stdout")
    assert any(r["msg"].startswith("generated worker token") for r in records)
    assert any(r["logger"].startswith("uvicorn") for r in records)
    assert worker is not None
    worker_out, _ = worker.communicate(timeout=10)
    worker_records = _json_lines(worker_out, "the worker's output")
    assert any(r["msg"].startswith("flux worker j connecting") for r in worker_records)
    assert any(r["msg"].startswith("connected to") for r in worker_records)


@pytest.mark.transports("sse")
def test_the_sse_worker_logs_its_http_calls_only_at_debug(cluster: Cluster) -> None:
    cluster.start_worker("quiet")
    cluster.start_worker("chatty", "--log-level", "DEBUG", "--label", "chatty=yes")  # after the subcommand
    for _ in range(3):
        assert cluster.run("echo", 1).state == control_pb2.EXECUTION_STATE_COMPLETED
    eventually(lambda: "HTTP Request: POST" in (cluster.workdir / "worker-chatty.log").read_text())
    quiet = (cluster.workdir / "worker-quiet.log").read_text()
    assert "connected to" in quiet and "HTTP Request" not in quiet


@pytest.mark.transports("grpc")
def test_workers_list_shows_a_connected_worker_as_seen_now(cluster: Cluster) -> None:
    cluster.start_worker("steady")
    connected_at = time.monotonic()
    # Long enough that SEEN would show the age of the last report were it still counted from there.
    eventually(lambda: time.monotonic() - connected_at > 4, timeout=10)
    status = json.loads(cluster.flux("status", "--json").stdout)  # dated by the server's own clock
    [steady] = [w for w in status["workers"] if w["name"] == "steady"]
    assert status["now_ms"] - steady["last_seen_ms"] <= 1_000  # the housekeeping step is at most 1 s


def test_a_bad_simulated_cpu_load_ends_the_worker_in_one_line(tmp_path: Path) -> None:
    env = {**_without_tokens(), "FLUX_SIMULATED_CPU_BUSY": "2"}
    result = subprocess.run(
        [sys.executable, "-m", "flux", "start", "worker", "w", "--server", "127.0.0.1:1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith("error: FLUX_SIMULATED_CPU_BUSY must be a fraction from 0 to 1")
    assert "Traceback" not in result.stderr


@pytest.mark.transports("grpc")
@pytest.mark.parametrize("group", ["pool", "tenant"])
def test_an_unreachable_server_is_named_by_the_pool_and_tenant_commands(cluster: Cluster, group: str) -> None:
    # Port 1 on loopback: nothing listens there. The same message as every other command's (client_requests).
    result = cluster.flux(group, "list", "--server", "127.0.0.1:1")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: cannot reach the Flux server at 127.0.0.1:1"), result.stderr
