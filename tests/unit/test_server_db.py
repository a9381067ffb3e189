"""Where ``flux start server`` keeps its state: --db, --db-file, $FLUX_DB_URL, then SQLite (issue 40).

A PostgreSQL URL carries a password, which on the command line every local user reads in
/proc/<pid>/cmdline; the file and environment forms keep it off there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.cli.parser import build_parser, leaf_parsers
from flux.server.serve import DB_ENV, DEFAULT_DB, resolve_db

URL = "postgresql://flux:s3cret@db:5432/flux"


@pytest.mark.parametrize(
    ("flag", "file", "env", "expected"),
    [
        pytest.param("a.db", "from-file", URL, "a.db", id="--db wins over everything"),
        pytest.param(
            None, "from-file", "postgresql://env/flux", URL, id="--db-file wins over the environment"
        ),
        pytest.param(None, None, URL, URL, id="environment"),
        pytest.param(None, None, "", str(DEFAULT_DB), id="empty environment is unset"),
        pytest.param(None, None, None, str(DEFAULT_DB), id="default SQLite under ./.flux"),
    ],
)
def test_precedence(
    tmp_path: Path, flag: str | None, file: str | None, env: str | None, expected: str
) -> None:
    path = None
    if file is not None:
        path = tmp_path / "url"
        path.write_text(URL + "\n")  # a Secret's value often ends in a newline
    environ = {} if env is None else {DB_ENV: env}
    assert resolve_db(flag, None if path is None else str(path), environ) == expected


def test_a_missing_or_empty_file_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--db-file '.*nope' cannot be read"):
        resolve_db(None, str(tmp_path / "nope"), {})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match=r"--db-file '.*empty' is empty: it holds the database URL"):
        resolve_db(None, str(tmp_path / "empty"), {DB_ENV: URL})


def test_only_the_trailing_newline_is_stripped(tmp_path: Path) -> None:
    (tmp_path / "url").write_text(URL + "\r\n\n")
    assert resolve_db(None, str(tmp_path / "url"), {}) == URL


def test_the_parser_takes_db_file_and_its_help_names_the_environment() -> None:
    args = build_parser().parse_args(["start", "server", "--db-file", "/etc/flux/db/url"])
    assert args.db_file == "/etc/flux/db/url" and args.db is None
    server = next(p for p in leaf_parsers(build_parser()) if p.prog.endswith("start server"))
    text = " ".join(server.format_help().split())
    assert "--db-file PATH" in text and "$FLUX_DB_URL" in text and "/proc/<pid>/cmdline" in text
