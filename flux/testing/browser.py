"""The system's headless chromium, as the dashboard tests and bench drive it (through Playwright).

Playwright's own browser downloads are never used: the distribution's
chromium is, found at ``FLUX_CHROMIUM`` or /usr/bin/chromium or on PATH.
"""

from __future__ import annotations

import os
import shutil

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("FLUX_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None
