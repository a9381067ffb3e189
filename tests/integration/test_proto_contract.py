"""`make check-proto`'s contract gate: buf lint plus buf breaking against the released snapshot.

Each case edits a copy of ``proto/`` (never the repo) and runs ``tools/check_proto.sh``
on it, the script the Makefile runs. buf is installed the way the Makefile installs it
(``tools/buf.sh`` runs ``npm ci``); a machine without npm fails here rather than skipping.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

# One process runs the whole module: buf's install check runs once, not once per pytest-xdist process.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("proto_contract")]

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check_proto.sh"
CONTROL = "flux/v1/control.proto"
WORKER = "flux/v1/worker.proto"
RESOURCES = "flux/v1/resources.proto"


@pytest.fixture(scope="module", autouse=True)
def _buf_installed():
    result = subprocess.run(
        [ROOT / "tools" / "buf.sh", "--version"], capture_output=True, text=True, timeout=110
    )
    assert result.returncode == 0, f"could not install buf via tools/buf.sh:\n{result.stderr}"


@pytest.fixture
def proto_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "proto"
    shutil.copytree(ROOT / "proto", copy)
    return copy


def _edit(proto_dir: Path, file: str, old: str, new: str) -> None:
    """Replace ``old``, which must occur exactly once in ``file``."""
    path = proto_dir / file
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {file}"
    path.write_text(text.replace(old, new))


def _check(proto_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHECK, proto_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60
    )


def test_the_checked_in_protos_pass(proto_copy):
    result = _check(proto_copy)
    assert result.returncode == 0, result.stdout


def test_a_new_commented_field_is_not_a_breaking_change(proto_copy):
    _edit(
        proto_copy,
        CONTROL,
        "  int64 updated_at_ms = 12;\n",
        "  int64 updated_at_ms = 12;\n  // A note for the test; never sent.\n  string test_note = 99;\n",
    )
    result = _check(proto_copy)
    assert result.returncode == 0, result.stdout


# (id, edits as (file, old, new), the file and the texts the output must name)
BREAKING = [
    (
        "renumbered field",
        [
            (
                CONTROL,
                "// Server-assigned id.\n  string execution_id = 1;",
                "// Server-assigned id.\n  string execution_id = 98;",
            )
        ],
        CONTROL,
        ['field "1" with name "execution_id" on message "Execution"'],
    ),
    (
        "removed field",
        [(CONTROL, "  int64 updated_at_ms = 12;\n", "")],
        CONTROL,
        ['field "12" with name "updated_at_ms" on message "Execution"'],
    ),
    (
        "changed field type",
        [(RESOURCES, "int64 memory = 2;", "int32 memory = 2;")],
        RESOURCES,
        ['"memory" on message "ResourceRequest"', "int64", "int32"],
    ),
    (
        "removed rpc",
        [(CONTROL, "  rpc CancelExecution(CancelExecutionRequest) returns (Execution);\n", "")],
        CONTROL,
        ['"CancelExecution"'],
    ),
    (
        "rpc no longer streams",
        [
            (
                CONTROL,
                "(WatchExecutionRequest) returns (stream Execution);",
                "(WatchExecutionRequest) returns (Execution);",
            )
        ],
        CONTROL,
        ['RPC "WatchExecution"', "streaming"],
    ),
    (
        "removed enum value",
        [(CONTROL, "  EXECUTION_STATE_CANCELLED = 6;\n", "")],
        CONTROL,
        ['enum value "6" on enum "ExecutionState"'],
    ),
    (
        "renamed message",
        [
            (WORKER, "    // Keeps an idle stream alive.\n    Ping ping = 4;\n", ""),
            (
                WORKER,
                "// Heartbeat on an idle stream.\nmessage Ping {",
                "// Heartbeat on an idle stream.\nmessage Pong {",
            ),
        ],
        WORKER,
        ['"Ping"', '"ping"'],
    ),
]


@pytest.mark.parametrize(
    ("edits", "file", "named"), [case[1:] for case in BREAKING], ids=[case[0] for case in BREAKING]
)
def test_a_breaking_change_fails_and_names_what_broke(proto_copy, edits, file, named):
    for edit in edits:
        _edit(proto_copy, *edit)
    result = _check(proto_copy)
    assert result.returncode != 0, result.stdout
    assert f"{file}:" in result.stdout
    for text in named:
        assert text in result.stdout
    assert "breaking change against the released contract" in result.stdout


# (id, file, old, new, what the output must name)
LINT = [
    ("rpc comment deleted", CONTROL, "  // Current state of one execution.\n", "", 'RPC "GetExecution"'),
    (
        "new field without a comment",
        CONTROL,
        "  int64 updated_at_ms = 12;\n",
        "  int64 updated_at_ms = 12;\n  int32 test_note = 99;\n",
        'Field "test_note"',
    ),
    (
        "message comment deleted",
        WORKER,
        "// Heartbeat on an idle stream.\n",
        "",
        'Message "Ping"',
    ),
    (
        "field not lower_snake_case",
        CONTROL,
        "  int64 updated_at_ms = 12;\n",
        "  int64 updated_at_ms = 12;\n  // A note for the test.\n  int32 testNote = 99;\n",
        '"testNote"',
    ),
    (
        "enum zero value not _UNSPECIFIED",
        CONTROL,
        "EXECUTION_STATE_UNSPECIFIED = 0;",
        "EXECUTION_STATE_UNKNOWN = 0;",
        '"EXECUTION_STATE_UNKNOWN"',
    ),
]


@pytest.mark.parametrize(("file", "old", "new", "named"), [c[1:] for c in LINT], ids=[c[0] for c in LINT])
def test_a_lint_finding_fails_and_names_where(proto_copy, file, old, new, named):
    _edit(proto_copy, file, old, new)
    result = _check(proto_copy)
    assert result.returncode != 0, result.stdout
    assert f"{file}:" in result.stdout
    assert named in result.stdout
    assert "lint failed" in result.stdout
