"""The dashboard's static files ship in the package and reference only each other."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]
BROWSER = ROOT / "gateway" / "browser"
UI = BROWSER / "ui"


def test_package_data_ships_every_dashboard_file() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = setuptools["package-data"]["gateway.browser"]
    shipped = {path for pattern in globs for path in BROWSER.glob(pattern)}
    present = {path for path in UI.rglob("*") if path.is_file()}
    assert present, "gateway/browser/ui/ is empty"
    assert present - shipped == set(), (
        "files under gateway/browser/ui/ that pyproject's package-data leaves out"
    )


def test_the_page_loads_only_files_that_exist_and_nothing_from_elsewhere() -> None:
    page = (UI / "index.html").read_text()
    references = re.findall(r'(?:src|href)="([^"#]+)"', page)
    local = [r for r in references if not r.startswith("data:")]
    assert {"style.css", "js/app.js"} <= set(local)
    for reference in local:
        assert "//" not in reference, f"{reference}: no CDN, no other origin"
        assert (UI / reference).is_file(), reference
    for module in (UI / "js").glob("*.js"):
        for imported in re.findall(r'from "(\./[^"]+)"', module.read_text()):
            assert (module.parent / imported).is_file(), f"{module.name} imports {imported}"
        code = re.sub(r"^\s*//.*$", "", module.read_text(), flags=re.M)
        assert ".innerHTML" not in code, f"{module.name}: build DOM from text, never markup"
