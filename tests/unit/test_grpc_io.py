"""Flux chooses gRPC's socket I/O before grpc is imported (flux/grpc_io.py): set when the
environment has no GRPC_EXPERIMENTS, left alone when it has one, and known to the grpc installed.
Each import is checked in a fresh interpreter, since grpc reads the variable once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)


def _python(code: str, **environ: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in {**os.environ, **environ}.items() if v is not None}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=50)


def test_importing_flux_sets_the_variable_when_the_environment_has_none() -> None:
    shown = _python("import os, flux; print(os.environ['GRPC_EXPERIMENTS'])", GRPC_EXPERIMENTS=None)
    assert shown.stdout.strip() == "-event_engine_client,-event_engine_listener"


@pytest.mark.parametrize("value", ["", "-event_engine_client"])
def test_a_variable_already_set_even_empty_is_left_as_it_is(value: str) -> None:
    shown = _python("import os, flux; print(repr(os.environ['GRPC_EXPERIMENTS']))", GRPC_EXPERIMENTS=value)
    assert shown.stdout.strip() == repr(value)


def test_the_installed_grpc_knows_both_names() -> None:
    # grpc logs an unknown name when it reads the variable; a bogus one shows the check can fail.
    start = "import flux, grpc; grpc.insecure_channel('127.0.0.1:9').close()"
    assert "Unknown experiment" not in _python(start, GRPC_EXPERIMENTS=None).stderr
    bogus = _python(start, GRPC_EXPERIMENTS="-no_such_experiment")
    assert "Unknown experiment: no_such_experiment" in bogus.stderr
