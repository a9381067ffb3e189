"""Getting started's "Other ports" block and its clean-up, run as written in a directory of their own.

The block starts a second server, which beside the first one of test_docs' session would share
its ./.flux/ database; so it runs here, in a fresh sandbox with test_readme's machinery (ports
as written map to ports the system picks). Then the server is stopped as a reader stops it
(Ctrl-C: SIGINT to the terminal's process group) and the clean-up line removes ./.flux/.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_readme import Session, _sandbox, _venv, commands, parse_blocks

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"


def _block(needle: str) -> str:
    found = [b for b in parse_blocks(PAGE.read_text()) if b.runs_commands and needle in b.text]
    assert len(found) == 1, f"docs/getting-started.md has {len(found)} blocks with {needle!r}"
    return found[0].text


@pytest.mark.timeout(300)
def test_the_other_ports_block_runs_and_the_clean_up_stops_and_forgets(tmp_path: Path) -> None:
    venv = _venv()
    sandbox = _sandbox(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUX_")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    session = Session(sandbox, env, {})
    try:
        ports = _block('FLUX_ARGS="--grpc-port 50061 --http-port 8081"')
        for line in commands(ports):
            session.run(line, "docs/getting-started.md (Other ports)")
        # The workers reached the server through the ports as written, and the client found it.
        assert session.env["FLUX_SERVER"] == session.grpc[50061]
        assert 8081 in session.http
        listed = subprocess.run(
            [str(venv / "bin" / "flux"), "workers", "list"], cwd=sandbox, env=session.env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert "local" in listed.stdout and "web" in listed.stdout, listed.stdout + listed.stderr

        # Ctrl-C in terminal 1: the server (and `make`) stop.
        _, server, log = next(entry for entry in session.background if entry[0].startswith("make run"))
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=30)
        assert "Traceback" not in log.read_text(), log.read_text()

        clean = [line for line in commands(_block("rm -rf .flux")) if line.startswith("rm -rf .flux")]
        assert clean, "the clean-up block removes ./.flux/"
        assert (sandbox / ".flux").is_dir()
        session.run(clean[0], "docs/getting-started.md (Clean up)")
        assert not (sandbox / ".flux").exists()
    finally:
        session.close()
