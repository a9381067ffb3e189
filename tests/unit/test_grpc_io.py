"""The server and the workers import grpc polling their sockets on the completion queue's thread
(flux/grpc_io.py), clients keep grpc's defaults, and nothing is left in the environment. Each case
runs in a fresh interpreter, since grpc reads GRPC_EXPERIMENTS once, when it is imported; a
finder on ``sys.meta_path`` records the variable at that moment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)

POLLED = "-event_engine_client,-event_engine_listener"

# Prints, as JSON: the variable when grpc was imported ("unset" if it was not), the variable after,
# and what ``choose`` returned; BODY runs between the finder's setup and the report.
_RECORD = """
import json, os, sys
seen = []
class Record:
    def find_spec(self, name, path=None, target=None):
        if name == "grpc":
            seen.append(os.environ.get("GRPC_EXPERIMENTS", "unset"))
sys.meta_path.insert(0, Record())
chosen = None
{body}
print(json.dumps([seen[0] if seen else "not imported", os.environ.get("GRPC_EXPERIMENTS", "unset"), chosen]))
"""


def _python(body: str, **environ: str | None) -> tuple[subprocess.CompletedProcess[str], list[object]]:
    env = {k: v for k, v in {**os.environ, **environ}.items() if v is not None}
    done = subprocess.run(
        [sys.executable, "-c", _RECORD.format(body=body)], env=env, capture_output=True, text=True, timeout=50
    )
    assert done.returncode == 0, done.stderr
    return done, json.loads(done.stdout.splitlines()[-1])


def test_choose_sets_the_variable_for_grpc_s_import_only() -> None:
    done, (at_import, after, chosen) = _python(
        "from flux import grpc_io\nchosen = grpc_io.choose()", GRPC_EXPERIMENTS=None
    )
    assert (at_import, after, chosen) == (POLLED, "unset", True)
    assert "Unknown experiment" not in done.stderr  # the grpc installed knows both names


def test_a_name_grpc_does_not_know_is_reported_by_grpc() -> None:
    # What the test above looks for in stderr does appear when a name is wrong: that check can fail.
    done, _ = _python(
        "import grpc\ngrpc.insecure_channel('127.0.0.1:9').close()", GRPC_EXPERIMENTS="-no_such_one"
    )
    assert "Unknown experiment: no_such_one" in done.stderr


@pytest.mark.parametrize("value", ["", "-event_engine_client"])
def test_a_variable_already_set_even_empty_is_the_operator_s(value: str) -> None:
    _, (at_import, after, chosen) = _python(
        "from flux import grpc_io\nchosen = grpc_io.choose()", GRPC_EXPERIMENTS=value
    )
    assert (at_import, after, chosen) == ("not imported", value, False)


def test_too_late_once_grpc_is_imported() -> None:
    _, (at_import, after, chosen) = _python(
        "import grpc\nfrom flux import grpc_io\nchosen = grpc_io.choose()", GRPC_EXPERIMENTS=None
    )
    assert (at_import, after, chosen) == ("unset", "unset", False)


# The CLI with each start command's handler replaced by one that imports grpc, as the real ones do.
_CLI = """
import types
fake = types.ModuleType("flux.cli.commands.start")
def _start(args):
    import grpc
    return 0
fake.start_server = fake.start_worker = fake.start_gateway = _start
sys.modules["flux.cli.commands.start"] = fake
from flux.cli.main import main
assert main({argv!r}) == 0
"""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["start", "server", "--grpc-port", "0"], POLLED),
        (["start", "worker", "w1"], POLLED),
        (["start", "gateway", "--core", "127.0.0.1:9"], "unset"),  # a client of the server: grpc's defaults
    ],
)
def test_flux_start_chooses_for_the_server_and_the_workers_only(argv: list[str], expected: str) -> None:
    _, (at_import, after, _) = _python(_CLI.format(argv=argv), GRPC_EXPERIMENTS=None)
    assert (at_import, after) == (expected, "unset")


def test_a_client_keeps_grpc_s_defaults() -> None:
    _, (at_import, after, _) = _python("from flux.client import FluxClient", GRPC_EXPERIMENTS=None)
    assert (at_import, after) == ("unset", "unset")
