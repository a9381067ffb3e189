"""What ``tracing.setup`` decides in a process of its own (the tracer provider is process-global):
each case starts a fresh interpreter with the OTEL settings it names (the pure parts of tracing are
tests/unit/test_tracing.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(10)]


def _setup_in_a_fresh_process(env: dict[str, str]) -> str:
    """What ``setup`` decides in a process of its own (the tracer provider is process-global)."""
    code = (
        "import sys; from flux import cli, client, worker; from flux.observe import tracing; "
        "print(tracing.setup('flux-test'), tracing.ACTIVE, 'opentelemetry.sdk' in sys.modules)"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_settings_the_sdk_is_not_even_imported() -> None:
    assert _setup_in_a_fresh_process({}) == "False False False"


def test_a_console_exporter_setting_turns_recording_on() -> None:
    assert _setup_in_a_fresh_process({"OTEL_TRACES_EXPORTER": "console"}) == "True True True"


def test_an_unknown_exporter_alone_records_nothing() -> None:
    assert _setup_in_a_fresh_process({"OTEL_TRACES_EXPORTER": "zipkin-ish"}) == "False False True"
