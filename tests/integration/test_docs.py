"""The documentation site builds strictly, and every code block on it runs in its own language.

The site (mkdocs.yml, docs/) is built with ``mkdocs build --strict``: a broken link or anchor,
a page left out of the nav, or an unknown generated reference fails it. With CI set, a missing
mkdocs fails rather than skips.

Code blocks run as tests/integration/test_readme.py runs the README's, with its machinery (one
shell session in a sandbox directory, servers on ports the system picks, the same doc-test
markers and ``# prints`` checks), over the pages in the nav's order, so that one server started
by Getting started serves every page after it:

- ``bash`` blocks: line by line in the session;
- ``python`` blocks: run with the project's Python in the session's directory and environment;
  a block that declares a workflow (``@workflow``) is also registered, as a reader would;
- ``js`` blocks: run with Node, in the session's directory and environment, exactly as
  written: a block that uses ``require`` is CommonJS (a ``.cjs`` file, so no top-level await),
  any other an ES module (``.mjs``, where ``import`` and top-level await work);
- ``text`` blocks are output and synopses, not run.

A block in any other language must be marked ``<!-- doc-test: skip REASON -->``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import yaml

from flux.testing.postgres import TemporaryPostgres
from tests.integration.test_readme import Block, Session, _sandbox, _venv, commands, parse_blocks

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SHELL = frozenset({"bash", "sh", "shell"})
RUNS = SHELL | {"python", "js", "javascript"}
SHOWN = frozenset({"text"})  # output and synopses


@dataclass(frozen=True)
class PageBlock:
    page: str  # relative to docs/
    block: Block

    def where(self) -> str:
        return f"docs/{self.page}:{self.block.line}"


def nav_pages() -> list[str]:
    """The site's pages in the nav's order (mkdocs.yml)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def walk(entries: list) -> list[str]:
        found: list[str] = []
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            found += walk(value) if isinstance(value, list) else [value]
        return found

    return walk(config["nav"])


def site_blocks() -> list[PageBlock]:
    found = []
    for page in nav_pages():
        try:
            blocks = parse_blocks((DOCS / page).read_text())
        except AssertionError as exc:  # its messages name README.md:LINE
            raise AssertionError(f"docs/{page}: {exc}") from None
        found += [PageBlock(page, block) for block in blocks]
    return found


# ---------------------------------------------------------------------- without running anything


def test_every_page_is_in_the_nav_and_every_block_runs_or_says_why() -> None:
    pages = nav_pages()
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(pages) == on_disk, "mkdocs.yml's nav and docs/*.md differ"
    blocks = site_blocks()
    assert {b.block.language for b in blocks} >= {"bash", "python", "js"}
    for item in blocks:
        block = item.block
        assert block.language, f"{item.where()}: a code block needs a language (text for output)"
        if block.language not in RUNS | SHOWN:
            assert block.marker is not None and block.marker[0] == "skip", (
                f"{item.where()}: a ```{block.language} block cannot run here: mark it skip with a reason"
            )
        if block.marker is not None:
            assert block.language not in SHOWN, f"{item.where()}: text blocks are not run; no marker needed"
    # The quick start and the guides that need a running server are run, never marked away.
    for must_run in (
        "make run",
        "flux start worker",
        "createdb",
        "node clients/node/flux.js",
        "tenant create",
        "grpc_tools.protoc",
        "workflow cancel",
    ):
        assert any(must_run in b.block.text and b.block.marker is None for b in blocks), must_run


def test_mkdocs_builds_the_site_strictly(tmp_path: Path) -> None:
    mkdocs = Path(_venv()) / "bin" / "mkdocs"
    if not mkdocs.exists():
        if os.environ.get("CI"):
            pytest.fail("mkdocs is not installed (the docs extra): CI must build the site", pytrace=False)
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "flux workflow run" in cli and "--starvation-after" in cli, "the CLI reference was not generated"
    grpc_page = (tmp_path / "site" / "reference" / "grpc" / "index.html").read_text()
    assert "RunAndWaitStream" in grpc_page, "the gRPC reference was not generated"


# ---------------------------------------------------------------------- running it


def _script(session: Session, item: PageBlock, index: int) -> str:
    """Writes a python or js block into the sandbox; the command line that runs it."""
    block = item.block
    text = "\n".join(session.substitute(line) for line in block.text.splitlines()) + "\n"
    if block.language == "python":
        name = f"docs_block_{index}.py"
        (session.directory / name).write_text(text)
        return f".venv/bin/python {name}"
    # As written: CommonJS where it requires, else an ES module (no wrapper that would hide a mix).
    name = f"docs_block_{index}.{'cjs' if 'require(' in text else 'mjs'}"
    (session.directory / name).write_text(text)
    return f"node {name}"


@pytest.mark.timeout(600)
def test_every_code_block_on_the_site_runs(tmp_path: Path, postgres: TemporaryPostgres) -> None:
    venv = _venv()
    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=ROOT, capture_output=True, timeout=60)
    if (ROOT / ".venv").exists() and stale.returncode != 0:
        pytest.fail("the .venv is older than pyproject.toml: run `make install` first", pytrace=False)
    sandbox = _sandbox(tmp_path)

    server = psycopg.conninfo.conninfo_to_dict(postgres.url)
    database = f"flux_docs_{uuid.uuid4().hex[:8]}"
    host, port, user = (
        server.get("host", "127.0.0.1"),
        str(server.get("port", 5432)),
        server.get("user", "postgres"),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLUX_", "PG"))}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PGHOST=str(host), PGPORT=port, PGUSER=str(user),
    )  # fmt: skip
    site = {
        "flux:secret@db.internal:5432/flux": f"{user}@{host}:{port}/{database}",
        "createdb flux ": f"createdb {database} ",
    }
    session = Session(sandbox, env, site)
    ran: list[str] = []
    skipped: list[str] = []
    try:
        for index, item in enumerate(site_blocks()):
            block = item.block
            if block.language not in RUNS:
                continue  # output and synopses; other languages are marked (checked above)
            if block.marker is not None:
                kind, argument = block.marker
                missing = [tool for tool in argument.split() if shutil.which(tool) is None]
                if kind == "skip" or missing:
                    skipped.append(f"{item.where()} ({kind} {argument})")
                    continue
            if block.language in SHELL:
                for line in commands(block.text):
                    session.run(line, item.where())
            else:
                session.run(_script(session, item, index), item.where())
                if block.language == "python" and "@workflow" in block.text:
                    session.run(f".venv/bin/flux workflow register docs_block_{index}.py", item.where())
            ran.append(item.where())
    finally:
        session.close()
        with contextlib.suppress(psycopg.Error), psycopg.connect(postgres.url, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    print(f"ran {len(ran)} blocks of the site ({len(session.ran)} lines); skipped {skipped}", file=sys.stderr)
    # Only marked blocks were left out.
    marked = {b.where() for b in site_blocks() if b.block.marker is not None}
    assert all(s.split(" (", 1)[0] in marked for s in skipped)
    assert any(where.startswith("docs/getting-started.md") for where in ran)
    # Other languages' stubs block ran: the generated code exists.
    assert list((sandbox / "gen" / "flux" / "v1").glob("*_pb2_grpc.py"))
