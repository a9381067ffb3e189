"""The chaos sampler's reading of the workers' markers (bench/chaos/sampler.py): only the bodies
of live processes that started before their marker count, so a child is started here and has
exited to give a dead pid (the invariants themselves are tests/unit/test_chaos_invariants.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.chaos.sampler import running

pytestmark = pytest.mark.integration


def test_markers_count_only_bodies_of_live_processes_older_than_their_marker(tmp_path) -> None:
    live, gone = tmp_path / "w1", tmp_path / "w2"
    live.mkdir()
    gone.mkdir()
    (live / "a").write_text(f"{os.getpid()} 2\n")
    (live / "b").write_text(f"{os.getpid()} 1\n")
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (gone / "c").write_text(f"{int(finished.stdout)} 4\n")  # a killed worker's marker: its pid is dead
    reused = live / "d"
    reused.write_text(f"{os.getpid()} 4\n")
    os.utime(reused, (0, 0))  # written before this process started: the pid was reused since
    (live / "e").write_text("garbage\n")
    found = running(tmp_path)
    assert {worker: sorted(cores) for worker, cores in found.items()} == {"w1": [1, 2], "w2": []}
    assert running(tmp_path / "absent") == {}
