"""mkdocs hooks: the generated reference, filled in while the site builds.

A page asks for a generated part with a line ``<!-- generated: NAME -->`` (NAME one of
``tools.docs_reference.GENERATED``: cli, http, grpc, errors); the line is replaced with the
text generated from the code now, so nothing generated is committed and nothing can drift.
An unknown NAME fails the build.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # mkdocs loads this file by path; tools/ and flux/ import from the root
    sys.path.insert(0, str(ROOT))

from tools.docs_reference import GENERATED  # noqa: E402

MARKER = re.compile(r"^<!-- generated: (?P<name>[\w-]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page, **_: object) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in GENERATED:
            raise ValueError(f"{page.file.src_path}: no generated reference named {name!r}")
        return GENERATED[name]()

    return MARKER.sub(fill, markdown)
