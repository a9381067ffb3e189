"""What importing a layer loads: the pure layers no grpc, the gateway no dispatcher.

Each import runs in a fresh interpreter, so nothing an earlier test imported hides a coupling.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def loaded_after(module: str) -> set[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("module", ["flux.matching", "flux.domain", "flux.domain.workflow", "flux.errors"])
def test_the_pure_layers_load_no_grpc_or_protobuf(module: str) -> None:
    loaded = loaded_after(module)
    assert not {name for name in loaded if name.split(".")[0] in ("grpc", "google")}
    assert not {name for name in loaded if name.startswith(("flux.v1", "flux.dispatcher", "flux.store"))}


def test_the_gateway_loads_no_dispatcher_matcher_or_store() -> None:
    loaded = loaded_after("gateway")
    assert not {
        name for name in loaded if name.startswith(("flux.dispatcher", "flux.matching", "flux.store"))
    }


def test_the_cli_loads_no_command_until_one_runs() -> None:
    """``flux start worker`` pays for the worker only (flux/cli/commands/lazy.py): building the
    parser loads no command module, client, server, dispatcher or worker."""
    code = (
        "import json, sys; from flux.cli.parser import build_parser; build_parser(); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    heavy = (
        "flux.client",
        "flux.aio",
        "flux.server",
        "flux.dispatcher",
        "flux.worker",
        "flux.store",
        "gateway",
    )
    loaded = set(json.loads(done.stdout))
    assert not {name for name in loaded if name.startswith(heavy)}
    assert not {
        name for name in loaded if name.startswith("flux.cli.commands.") and name != "flux.cli.commands.lazy"
    }
