"""The README runs: every ```bash block is executed, in order, as a user following it would.

The README is the front door (what Flux is, two commands, one table, links); the site (docs/)
holds the rest, and tests/integration/test_docs.py runs its blocks with this file's machinery.
The README stays at most 250 lines, opens with `make run` and `make test`, and every link into
the site names a page that exists.

A block is skipped only when the line right above its fence says so, with a reason:

    <!-- doc-test: skip REASON -->         never run here (e.g. `make test`, which runs this test)
    <!-- doc-test: needs TOOL... -->       run when every TOOL is on PATH, skipped otherwise

New blocks are picked up by themselves: add a ```bash block and it runs (or mark it).
```python blocks are workflow declarations: each is registered with `flux workflow register`.

All blocks share one shell session in a sandbox directory (the repository's files linked
in, its own ./.flux/), so tokens, exported variables and `id=$(...)` carry from line to
line. Three things differ from a user's terminal, each for a reason:

- Long-running commands (`make run`, `flux start server|worker|gateway`, the Node worker)
  start in the background, are waited for (a server until it prints its ports, a worker
  until it is listed as connected) and stopped at the end.
- Servers bind port 0 (tests never take fixed ports): `make run` gets
  `FLUX_ARGS="--grpc-port 0 --http-port 0"`, `--grpc-port N`/`--http-port M` become 0,
  and later lines have `127.0.0.1:N` and `http://127.0.0.1:M` replaced with the ports
  the server printed. A server started on the default ports also sets `FLUX_SERVER`, as
  the default address would reach it.
- Site values (`flux:secret@db.internal:5432/flux`, `createdb flux`, on the site's scaling
  page) point at the test's PostgreSQL, and PGHOST/PGPORT/PGUSER are set as `createdb` expects.

A `# prints TEXT` comment on a line is checked: TEXT must appear in what the line prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from flux.testing.postgres import TemporaryPostgres

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
COMMAND_LANGUAGES = frozenset({"bash", "sh", "shell"})
MARKER = re.compile(r"^<!--\s*doc-test:\s*(?P<kind>skip|needs)\b\s*(?P<arg>.*?)\s*-->$")
FENCE = re.compile(r"^```(?P<language>[\w+-]*)\s*$")
SERVER = re.compile(r"^(make run|(\S*/)?flux start server)\b")
BACKGROUND = re.compile(r"^((\S*/)?flux start (worker|gateway)|node \S*flux\.js worker)\b")
LISTENING = re.compile(r"listening on (\S+):(\d+) \(grpc\)")
GATEWAY = re.compile(r"^flux gateway listening on (https?://\S+)$")
PRINTS = re.compile(r"^#\s*prints\s+(?P<text>.+?)\s*$")
DEFAULT_GRPC, DEFAULT_HTTP = 50051, 8080
LINE_TIMEOUT = 120.0
READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: tuple[str, str] | None  # (kind, argument)

    @property
    def runs_commands(self) -> bool:
        return self.language in COMMAND_LANGUAGES

    def where(self) -> str:
        return f"README.md:{self.line}"


def parse_blocks(markdown: str) -> list[Block]:
    """Fenced blocks with the doc-test marker right above each; a stray marker is an error."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    index = 0
    pending: tuple[int, tuple[str, str]] | None = None
    while index < len(lines):
        line = lines[index]
        marker = MARKER.match(line.strip())
        if marker:
            if not marker["arg"]:
                raise AssertionError(
                    f"README.md:{index + 1}: a doc-test marker needs a reason or a tool list"
                )
            pending = (index, (marker["kind"], marker["arg"]))
            index += 1
            continue
        fence = FENCE.match(line)
        if fence:
            end = next((i for i in range(index + 1, len(lines)) if lines[i].startswith("```")), None)
            if end is None:
                raise AssertionError(f"README.md:{index + 1}: unclosed code block")
            attached = pending[1] if pending is not None and pending[0] == index - 1 else None
            if pending is not None and attached is None:
                raise AssertionError(
                    f"README.md:{pending[0] + 1}: a doc-test marker must sit right above a fence"
                )
            blocks.append(Block(index + 1, fence["language"], "\n".join(lines[index + 1 : end]), attached))
            pending = None
            index = end + 1
            continue
        if pending is not None and line.strip():
            raise AssertionError(
                f"README.md:{pending[0] + 1}: a doc-test marker must sit right above a fence"
            )
        index += 1
    return blocks


def commands(text: str) -> Iterator[str]:
    """Logical lines: continuations joined, blank and comment-only lines dropped."""
    joined = ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            joined += raw.rstrip()[:-1] + " "
            continue
        line, joined = (joined + raw).strip(), ""
        if line and not line.startswith("#"):
            yield line


def split_comment(line: str) -> tuple[str, str]:
    """(command, comment): a '#' starts a comment outside quotes, at the start or after a space."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def without_comment(line: str) -> str:
    return split_comment(line)[0]


def expected_output(line: str) -> str | None:
    """The TEXT of a trailing ``# prints TEXT`` comment."""
    match = PRINTS.match(split_comment(line)[1])
    return match["text"] if match else None


# ---------------------------------------------------------------------- the parser alone


def test_the_readme_marks_every_block_it_does_not_run() -> None:
    blocks = parse_blocks(README.read_text())
    command_blocks = [b for b in blocks if b.runs_commands]
    assert command_blocks, "the README has no ```bash blocks"
    for block in blocks:
        if block.marker is not None:
            assert block.runs_commands, f"{block.where()}: doc-test markers belong on ```bash blocks"
    # The quick start is run, never marked away: a server, a worker, a run, explain, cancel.
    for must_run in (
        "make run",
        "flux start worker",
        "workflow run hello",
        "execution explain",
        "workflow cancel",
    ):
        assert any(must_run in b.text and b.marker is None for b in command_blocks), must_run


MAX_README_LINES = 250
LINK = re.compile(r"\]\((?!https?://|#)(?P<target>[^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_a_front_door() -> None:
    """At most 250 lines; the two commands first; links that land; the port override as on the site."""
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; at most {MAX_README_LINES}"
    first = parse_blocks(text)[0]
    assert first.line <= 5 and first.runs_commands, "the README opens with its two commands"
    assert [line.split()[:2] for line in commands(first.text)] == [["make", "run"], ["make", "test"]]
    targets = LINK.findall(text)
    assert len({t for t in targets if t.startswith("docs/")}) >= 20, "a link into the site per section"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
    # The port override reads the same in the README and on Getting started (whose block runs it).
    override = 'make run FLUX_ARGS="--grpc-port 50061 --http-port 8081"'
    assert override in text
    assert override in (ROOT / "docs" / "getting-started.md").read_text()


def test_the_parser_attaches_markers_and_refuses_stray_ones() -> None:
    text = "x\n<!-- doc-test: skip slow -->\n```bash\nmake test\n```\n```bash\necho hi\n```\n```\nsynopsis\n```\n"
    blocks = parse_blocks(text)
    assert [(b.language, b.marker, b.text) for b in blocks] == [
        ("bash", ("skip", "slow"), "make test"),
        ("bash", None, "echo hi"),
        ("", None, "synopsis"),
    ]
    with pytest.raises(AssertionError, match="right above a fence"):
        parse_blocks("<!-- doc-test: skip slow -->\n\nprose\n```bash\nls\n```\n")
    with pytest.raises(AssertionError, match="needs a reason"):
        parse_blocks("<!-- doc-test: skip -->\n```bash\nls\n```\n")
    assert list(commands("a \\\n  b\n# only a comment\n\nc  # trailing")) == ["a    b", "c  # trailing"]
    assert expected_output('run hello \'"World"\' --wait   # prints "Hello, World!"') == '"Hello, World!"'
    assert expected_output("echo '# prints nothing'") is None


# ---------------------------------------------------------------------- running it


class Session:
    """One shell session over the README: environment, background processes, port mapping."""

    def __init__(self, directory: Path, env: dict[str, str], site: dict[str, str]):
        self.directory = directory
        self.env = env
        self.site = site  # README placeholder -> this test's value
        self.grpc: dict[int, str] = {}  # port as written -> address the server bound
        self.http: dict[int, str] = {}  # port as written -> gateway URL
        self.cores: dict[str, str] = {}  # gateway URL -> the gRPC address of its server
        self.background: list[tuple[str, subprocess.Popen[str], Path]] = []
        self.ran: list[str] = []
        self._envfile = directory / ".doc-test-env"

    # ---- text

    def substitute(self, line: str) -> str:
        for placeholder, value in self.site.items():
            line = line.replace(placeholder, value)
        for port, url in self.http.items():
            line = re.sub(rf"https?://127\.0\.0\.1:{port}\b", url, line)
        for port, address in self.grpc.items():
            line = re.sub(rf"\b127\.0\.0\.1:{port}\b", address, line)
        return line

    # ---- running

    def run(self, line: str, where: str) -> None:
        written = line
        command = without_comment(line)
        if SERVER.match(command):
            self._server(self.substitute(command), where)
        elif BACKGROUND.match(command):
            self._background(self.substitute(command), where)
        else:
            self._foreground(self.substitute(line), written, where)
        self.ran.append(written)

    def _foreground(self, line: str, written: str, where: str) -> None:
        # set -a: assignments (`id=$(...)`) are exported, so the next line sees them like a shell would.
        script = f"set -eo pipefail\nset -a\n{line}\nenv -0 > {shlex.quote(str(self._envfile))}\n"
        result = subprocess.run(
            ["bash", "-c", script], cwd=self.directory, env=self.env, capture_output=True, text=True,
            timeout=LINE_TIMEOUT,
        )  # fmt: skip
        assert result.returncode == 0, (
            f"{where}: `{written}` exited {result.returncode}\nran: {line}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
        entries = self._envfile.read_text().split("\0")
        self.env = dict(e.split("=", 1) for e in entries if "=" in e)
        expected = expected_output(written)
        if expected is not None:
            assert expected in result.stdout, (
                f"{where}: `{written}` should print {expected}; got {result.stdout!r}"
            )

    def _spawn(self, command: str, log_name: str, stdout_pipe: bool) -> tuple[subprocess.Popen[str], Path]:
        log = self.directory / f".doc-test-{log_name}.log"
        handle = open(log, "a")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=self.directory,
            env={**self.env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE if stdout_pipe else handle,
            stderr=handle,
            text=True,
            start_new_session=True,  # its own process group: `make run` and its server stop together
        )
        self.background.append((command, process, log))
        return process, log

    def _server(self, command: str, where: str) -> None:
        grpc_port = re.search(r"--grpc-port[ =](\d+)", command)
        http_port = re.search(r"--http-port[ =](\d+)", command)
        written_grpc = int(grpc_port[1]) if grpc_port else DEFAULT_GRPC
        written_http = int(http_port[1]) if http_port else DEFAULT_HTTP
        if command.startswith("make run"):
            command = 'make run FLUX_ARGS="--grpc-port 0 --http-port 0"'
        else:
            command = re.sub(r"--(grpc|http)-port[ =]\d+", r"--\1-port 0", command)
            command += "" if grpc_port else " --grpc-port 0"
            command += "" if http_port or "--no-http" in command else " --http-port 0"
        process, log = self._spawn(command, f"server-{len(self.background)}", stdout_pipe=True)
        address, gateway = self._read_ports(process, "--no-http" not in command, where, log)
        self.grpc[written_grpc] = address
        if gateway:
            self.http[written_http] = gateway
            self.cores[gateway] = address
        if not grpc_port:
            # The default address would reach this server: clients without --server use it.
            self.env["FLUX_SERVER"] = address

    def _read_ports(
        self, process: subprocess.Popen[str], http: bool, where: str, log: Path
    ) -> tuple[str, str]:
        found: dict[str, str] = {}
        done = threading.Event()

        def read() -> None:
            assert process.stdout is not None
            for raw in process.stdout:
                line = raw.strip()
                if match := LISTENING.search(line):
                    found["grpc"] = f"{match[1]}:{match[2]}"
                elif match := GATEWAY.match(line):
                    found["http"] = match[1]
                if "grpc" in found and ("http" in found or not http):
                    break
            done.set()

        threading.Thread(target=read, daemon=True).start()
        done.wait(READY_TIMEOUT)
        if "grpc" not in found or (http and "http" not in found):
            raise AssertionError(f"{where}: the server did not print its ports; log:\n{_tail(log)}")
        return found["grpc"], found.get("http", "")

    def _background(self, command: str, where: str) -> None:
        words = shlex.split(command)
        name = words[words.index("worker") + 1] if "worker" in words else ""
        process, log = self._spawn(command, f"{name or 'gateway'}-{len(self.background)}", stdout_pipe=False)
        if not name:
            return
        servers = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--server"]
        # A worker over a gateway is asked after at the core behind that gateway.
        servers += [self.cores[w] for w in words if w in self.cores]
        ask = ["--server", servers[0]] if servers else []
        flux = str(Path(self.env["VIRTUAL_ENV"]) / "bin" / "flux")
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None and process.returncode != 0:
                raise AssertionError(f"{where}: `{command}` exited {process.returncode}:\n{_tail(log)}")
            listed = subprocess.run(
                [flux, "workers", "list", "--json", *ask], cwd=self.directory, env=self.env,
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            if listed.returncode == 0 and any(
                w["name"] == name and w["connected"] for w in json.loads(listed.stdout)["workers"]
            ):
                return
            if process.poll() is not None:  # finished on its own (e.g. --max-executions): it did connect
                return
            time.sleep(0.2)
        raise AssertionError(f"{where}: worker {name} did not connect; its log:\n{_tail(log)}")

    def close(self) -> None:
        for _, process, _ in reversed(self.background):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for _, process, _ in reversed(self.background):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


def _venv() -> Path:
    """The environment `make install` made: the repository's .venv, or the one running the tests."""
    venv = ROOT / ".venv"
    return venv if (venv / "bin" / "flux").exists() else Path(sys.prefix)


def _sandbox(tmp_path: Path) -> Path:
    """A directory that looks like a fresh clone after `make install`: the repository's files linked in."""
    sandbox = tmp_path / "clone"
    sandbox.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in {".git", ".flux", ".venv", "gen"} or entry.name.startswith(
            (".pytest", ".ruff", ".hyp")
        ):
            continue
        (sandbox / entry.name).symlink_to(entry)
    (sandbox / ".venv").symlink_to(_venv())
    return sandbox


@pytest.mark.timeout(600)
def test_every_command_block_in_the_readme_runs(tmp_path: Path, postgres: TemporaryPostgres) -> None:
    venv = _venv()
    # `make run` must find the project installed; were pyproject.toml newer, make would reinstall from the sandbox.
    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=ROOT, capture_output=True, timeout=60)
    if (ROOT / ".venv").exists() and stale.returncode != 0:
        pytest.fail("the .venv is older than pyproject.toml: run `make install` first", pytrace=False)
    sandbox = _sandbox(tmp_path)

    server = psycopg.conninfo.conninfo_to_dict(postgres.url)
    database = f"flux_readme_{uuid.uuid4().hex[:8]}"
    host, port, user = (
        server.get("host", "127.0.0.1"),
        str(server.get("port", 5432)),
        server.get("user", "postgres"),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLUX_", "PG"))}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PGHOST=str(host), PGPORT=port, PGUSER=str(user),
    )  # fmt: skip
    site = {
        "flux:secret@db.internal:5432/flux": f"{user}@{host}:{port}/{database}",
        "createdb flux ": f"createdb {database} ",
    }
    session = Session(sandbox, env, site)
    ran: list[str] = []
    skipped: list[str] = []
    try:
        for index, block in enumerate(parse_blocks(README.read_text())):
            if block.language == "python":
                path = sandbox / f"readme_block_{index}.py"
                path.write_text(block.text + "\n")
                session.run(f".venv/bin/flux workflow register {path.name}", block.where())
                ran.append(block.where())
                continue
            if not block.runs_commands:
                continue  # synopses and layouts, not commands
            if block.marker is not None:
                kind, argument = block.marker
                missing = [tool for tool in argument.split() if shutil.which(tool) is None]
                if kind == "skip" or missing:
                    skipped.append(f"{block.where()} ({kind} {argument})")
                    continue
            for line in commands(block.text):
                session.run(line, block.where())
            ran.append(block.where())
    finally:
        session.close()
        with contextlib.suppress(psycopg.Error), psycopg.connect(postgres.url, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    # Only marked blocks were left out; every other one ran to the end.
    marked = [b for b in parse_blocks(README.read_text()) if b.runs_commands and b.marker is not None]
    assert len(skipped) <= len(marked)
    assert all(any(s.startswith(b.where() + " ") for b in marked) for s in skipped)
    print(f"ran {len(ran)} README blocks ({len(session.ran)} lines); skipped {skipped}")
    # The quick start ran to its end: the execution it waited on was cancelled.
    assert any("workflow cancel" in line for line in session.ran)
