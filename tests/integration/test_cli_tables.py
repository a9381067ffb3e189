"""`flux workers list`, `flux execution list` and `flux status` at 80 and 200 columns, against a real cluster.

The width comes from COLUMNS, as a terminal's would; piped output without it stays whole.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flux.testing import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc")]


def flux_at(cluster: Cluster, columns: int | None, *args: str) -> str:
    env = {**os.environ, "FLUX_SERVER": cluster.address}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    result = subprocess.run(
        [sys.executable, "-m", "flux", *args], cwd=cluster.workdir, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def header_over_cells(table: str) -> None:
    """Every header word starts a column whose cells start (or, for numbers, end) under it."""
    header, *rows = table.splitlines()
    note = next((i for i, row in enumerate(rows) if row.startswith("(")), len(rows))
    rows = rows[:note]  # not the note of what was left out
    for word in header.split():
        start = header.index(word)
        end = start + len(word)
        for row in rows:
            row = row.ljust(end + 1)
            starts_here = row[start] != " " and (start == 0 or row[start - 1] == " ")
            ends_here = row[end - 1] != " " and row[end] == " "
            assert starts_here or ends_here, (word, header, row)


def test_tables_fit_80_and_200_columns(cluster: Cluster) -> None:
    cluster.start_worker("w-tables", "--label", "zone=a", "--label", "role=training")
    for n in range(3):
        cluster.run("echo", n)
    for columns in (80, 200):
        workers = flux_at(cluster, columns, "workers", "list")
        executions = flux_at(cluster, columns, "execution", "list")
        status = flux_at(cluster, columns, "status")
        for what, text in (("workers list", workers), ("execution list", executions), ("status", status)):
            too_wide = [line for line in text.splitlines() if len(line) > columns]
            assert not too_wide, (what, columns, too_wide)
        assert workers.splitlines()[1].split()[:2] == ["w-tables", "connected"]
        header_over_cells(workers)
        assert executions.splitlines()[0].split()[:3] == ["EXECUTION", "WORKFLOW", "STATE"]
        assert len([line for line in executions.splitlines() if "COMPLETED" in line]) == 3
        header_over_cells(executions)
        worker_table = status.split("\n\n")[1]
        assert worker_table.startswith("NAME") and "w-tables" in worker_table
        header_over_cells(worker_table)
    # Without a width (a pipe), every column, every cell whole.
    whole = flux_at(cluster, None, "workers", "list")
    assert "LIMITS" in whole and "role=training,zone=a" in whole and "(reserved " in whole
