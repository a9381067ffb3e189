"""CLI tables sized from their content and to the terminal: workers list, execution list, status.

An outside review saw ``flux workers list`` headers that did not line up with their columns
(``LOAD`` 24 wide, its values 4): the resource columns were right-aligned phrases, so each
header sat at the far end of a wide column.
"""

from __future__ import annotations

import pytest

from flux.cli import tables
from flux.cli.render.executions import executions_text
from flux.cli.render.status import status_text
from flux.cli.render.workers import WORKER_HEADER, workers_text
from flux.v1 import control_pb2, worker_pb2
from tests.unit.test_render import NOW_MS, GiB, status, worker

WORKERS = [
    worker("gpu-box-01", cpu=(6, 32), memory=(12 * GiB, 64 * GiB), gpus=(1, 2), load=(3, 16),
           labels={"zone": "a", "role": "training"}),
    worker("web-1", transport="sse", draining=True, seen_ago_s=75),
    worker("old", connected=False, seen_ago_s=4000, load=(2, 4)),
]  # fmt: skip

EXECUTIONS = [
    control_pb2.Execution(
        execution_id=f"{n:08x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
        workflow=worker_pb2.WorkflowRef(name=name, version=version),
        state=state,
        worker=worker_name,
        attempt=attempt,
        priority=priority,
        created_at_ms=NOW_MS - 65_000 * (n + 1),
    )
    for n, (name, version, state, worker_name, attempt, priority) in enumerate(
        [
            ("train_resnet", 3, control_pb2.EXECUTION_STATE_RUNNING, "gpu-box-01", 1, 10),
            ("echo", 1, control_pb2.EXECUTION_STATE_COMPLETED, "web-1", 2, 0),
            ("echo", 1, control_pb2.EXECUTION_STATE_CREATED, "", 1, -5),
        ]
    )
]


def _columns(header: str) -> list[tuple[str, int, int]]:
    """(name, start, end) of each header word (every header here is one word)."""
    found, at = [], 0
    for name in header.split():
        start = header.index(name, at)
        found.append((name, start, start + len(name)))
        at = start + len(name)
    return found


def assert_aligned(table: str, right: set[str]) -> None:
    """Each cell starts under its header (left-aligned) or ends under it (right-aligned)."""
    header, *rows = table.splitlines()
    note = next((i for i, row in enumerate(rows) if row.startswith("(")), len(rows))
    rows = rows[:note]  # not the note of what was left out
    columns = _columns(header)
    for index, (name, start, end) in enumerate(columns):
        for row in rows:
            if name in right:
                assert row[end - 1] != " " and (len(row) == end or row[end] == " "), (name, row)
            else:
                assert (start == 0 or row[start - 2 : start] == "  ") and row[start] != " ", (name, row)
                following = columns[index + 1][1] if index + 1 < len(columns) else None
                cell = row[start:following].rstrip()
                assert cell and "  " not in cell.strip(), (name, row)


def fits(text: str, width: int) -> None:
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, too_wide


@pytest.mark.parametrize("width", [80, 200])
def test_workers_list(width: int) -> None:
    text = workers_text(WORKERS, NOW_MS, width)
    fits(text, width)
    header = text.splitlines()[0].split()
    assert header[:3] == ["NAME", "STATE", "LOAD"] or header[:4] == ["NAME", "STATE", "TRANSPORT", "LOAD"]
    assert {"CPU", "MEMORY"} <= set(header)
    compact = "free 26/32" not in text
    assert_aligned(text, {"LOAD", "CPU", "MEMORY", "GPUS", "DISK"} if compact else {"LOAD"})
    assert [line.split()[0] for line in text.splitlines()[1:4]] == ["gpu-box-01", "web-1", "old"]
    if width == 80:
        assert "(LIMITS, SEEN, TRANSPORT, DISK left out to fit 80 columns;" in text


def test_workers_list_is_whole_when_not_narrowed() -> None:
    text = workers_text(WORKERS, NOW_MS)
    assert text.splitlines()[0].split() == list(WORKER_HEADER)
    assert "free 52.0/64.0 GiB (reserved 12.0 GiB)" in text
    assert_aligned(text, {"LOAD"})


@pytest.mark.parametrize("width", [80, 200])
def test_execution_list(width: int) -> None:
    text = executions_text(EXECUTIONS, NOW_MS, width)
    fits(text, width)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["EXECUTION", "WORKFLOW", "STATE"]
    assert [line.split()[3] for line in lines[1:4]] == [
        "RUNNING",
        "COMPLETED",
        "CREATED",
    ]  # WORKFLOW is "name vN"
    assert_aligned(text, {"ATTEMPT", "PRIORITY"})
    if width == 200:
        assert lines[0].split() == [
            "EXECUTION",
            "WORKFLOW",
            "STATE",
            "WORKER",
            "ATTEMPT",
            "PRIORITY",
            "SUBMITTED",
        ]
        assert len(lines) == 4 and EXECUTIONS[0].execution_id in lines[1] and "1m05s ago" in lines[1]


@pytest.mark.parametrize("width", [80, 200])
def test_status(width: int) -> None:
    message = status()
    message.workers.extend(WORKERS)
    text = status_text(message, width)
    fits(text, width)
    lines = text.splitlines()
    assert lines[0] == "workers     1 connected (1 grpc), 1 disconnected"
    blocks = text.split("\n\n")
    assert blocks[1].startswith("NAME") and blocks[2].startswith("COUNT")
    compact = "free 26/32" not in blocks[1]
    assert_aligned(blocks[1], {"LOAD", "CPU", "MEMORY", "GPUS", "DISK"} if compact else {"LOAD"})
    assert_aligned(blocks[2], {"COUNT", "OLDEST"})
    # Wrapped summary lines continue under their text, not under the label.
    assert all(line.startswith(" " * 12) or line[:12].strip() for line in blocks[0].splitlines())


def test_a_column_too_wide_is_cut_with_an_ellipsis() -> None:
    text = tables.render(("NAME", "NOTE"), [("a", "x" * 50)], width=20, shrink=(1,))
    assert text.splitlines() == ["NAME  NOTE", "a     " + "x" * 13 + "…"]


def test_terminal_width_honours_columns_and_leaves_pipes_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setenv("COLUMNS", "97")
    assert tables.terminal_width(io.StringIO()) == 97
    monkeypatch.delenv("COLUMNS")
    assert tables.terminal_width(io.StringIO()) is None
