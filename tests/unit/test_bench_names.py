"""Every ``python -m bench NAME`` the README, the site (docs/) and the benchmarks' own docstrings tell a reader to
run names a benchmark ``python -m bench`` accepts (one was dropped from its table once, and the
command the README gave was refused)."""

from __future__ import annotations

import re
from pathlib import Path

from bench.__main__ import BENCHES

ROOT = Path(__file__).resolve().parents[2]
# Names may hold a hyphen (keda-flood): the whole name, not the part before it, must be a benchmark.
COMMAND = re.compile(r"python -m bench ([a-z][a-z_-]*)")


def test_every_bench_the_docs_name_is_one_python_m_bench_runs() -> None:
    texts = {"README.md": (ROOT / "README.md").read_text()}
    texts.update({str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))})
    texts.update({str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "bench").glob("*.py"))})
    named = {(where, name) for where, text in texts.items() for name in COMMAND.findall(text)}
    assert named, "the pattern finds nothing: the test would pass whatever the docs say"
    unknown = sorted((where, name) for where, name in named if name not in BENCHES)
    assert not unknown, f"named but not a benchmark of `python -m bench`: {unknown}"
