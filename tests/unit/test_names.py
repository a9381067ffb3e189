"""Every pattern that checks a name refuses a trailing newline.

``re.match(r"^...$")`` accepts "w1\\n" ("$" matches before a final newline), which
registered a second worker beside "w1" and split log lines. Name patterns are
written without anchors and always used with ``fullmatch``; this file lists every
module-level pattern in the code so a new one cannot arrive untested.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import flux
import gateway
from flux.dispatcher.core import Dispatcher, WorkerRegistration
from flux.domain.labels import validate_labels
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.errors import InvalidArgument
from flux.workflow import validate_name

HASH = "ab" * 32

# Patterns that check a name or an identifier, with a value each accepts.
NAME_PATTERNS = {
    "flux.dispatcher.state.validation.WORKER_NAME": "w1",
    "flux.dispatcher.state.validation.SOURCE_HASH": HASH,
    "flux.dispatcher.state.validation.RUNTIME_NAME": "python",
    "flux.worker.code_cache.SOURCE_HASH": HASH,
    "flux.workflow._NAME": "data_processing_workflow",
    "flux.domain.labels._KEY": "example.com/role",
    "flux.domain.labels._VALUE": "training",
    "flux.domain.tenant.NAME": "ml-team",
    "flux.domain.limits._KEY": "customer.id",
    "flux.domain.limits._LIMIT_NAME": "openai",
    "flux.domain.schedule._NAME": "nightly-report",
    "flux.domain.batch._BATCH_ID": "b-" + "0" * 24,
}
# Patterns that parse or scan text rather than accept a name.
NOT_NAMES = {
    "flux.domain.duration._PART",
    "flux.domain.limits._RATE",
    "flux.domain.quantity._QUANTITY",
    "flux.matching.packages._QUOTED",
    "flux.matching.packages._WORD",
    "flux.observe.logs._NEEDS_QUOTES",
    "flux.testing.LISTENING",
    "flux.testing.GATEWAY",
    "flux.testing.processes.LISTENING",  # the same two patterns, where they are defined
    "flux.testing.processes.GATEWAY",
    "gateway.wire.protojson._PARSING",
    "gateway.wire.protojson._DIGITS",
    "gateway.security.tickets.TICKET_FORM",  # the form of what POST /tickets mints, not a name
}


def _module_patterns() -> dict[str, re.Pattern[str]]:
    # Files, not pkgutil: some packages here are namespace packages, which walk_packages skips.
    found: dict[str, re.Pattern[str]] = {}
    for package in (flux, gateway):
        root = Path(package.__file__).parent
        for file in sorted(root.rglob("*.py")):
            parts = file.relative_to(root.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if name.startswith("flux.v1") or name.endswith("__main__"):
                continue
            module = importlib.import_module(name)
            for attribute, value in vars(module).items():
                if isinstance(value, re.Pattern):
                    found[f"{name}.{attribute}"] = value
    return found


def _pattern(path: str) -> re.Pattern[str]:
    module, _, attribute = path.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def test_every_module_level_pattern_is_listed_here() -> None:
    found = set(_module_patterns())
    assert found - NAME_PATTERNS.keys() - NOT_NAMES == set(), "classify these in NAME_PATTERNS or NOT_NAMES"
    assert NAME_PATTERNS.keys() | NOT_NAMES <= found


@pytest.mark.parametrize(("path", "valid"), list(NAME_PATTERNS.items()), ids=list(NAME_PATTERNS))
def test_a_name_pattern_refuses_a_newline(path: str, valid: str) -> None:
    pattern = _pattern(path)
    assert pattern.fullmatch(valid)
    for bad in (valid + "\n", "\n" + valid, valid + "\r\n", valid[:1] + "\n" + valid[1:]):
        assert not pattern.fullmatch(bad), repr(bad)
        # Anchors inside the pattern would let a caller's re.match accept it anyway.
        assert not pattern.match(bad) or pattern.match(bad).end() < len(bad), repr(bad)


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(lambda: validate_name("hello\n"), id="workflow name"),
        pytest.param(lambda: validate_labels({"role\n": "x"}, "labels"), id="label key"),
        pytest.param(lambda: validate_labels({"role": "x\n"}, "labels"), id="label value"),
    ],
)
def test_validators_refuse_a_trailing_newline(check) -> None:
    with pytest.raises(ValueError, match="invalid"):
        check()


class _NoStore:
    """register_worker refuses the name before it touches the store."""


async def test_a_worker_name_with_a_trailing_newline_is_refused() -> None:
    dispatcher = Dispatcher(_NoStore())  # type: ignore[arg-type]
    registration = WorkerRegistration("w1\n", WorkerResources(), WorkerSoftware(), {})
    with pytest.raises(InvalidArgument, match="name 'w1\\\\n' is invalid"):
        await dispatcher.register_worker(registration)
    with pytest.raises(InvalidArgument, match="source_hash must be 64"):
        await dispatcher.get_source(HASH + "\n")
