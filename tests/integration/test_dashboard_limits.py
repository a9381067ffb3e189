"""The dashboard's Limits view, in a real headless chromium against a real cluster.

A named limit of one at a time is made with the CLI, two runs of a workflow that shares it are
started (one holds the slot, one waits), and the page is read through its DOM: the totals from
GET /status (in use, waiting) and the named limit's terms and busiest keys from GET /limits.
Every wait is bounded (Playwright's expect timeouts); nothing asserts a duration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.security import Role
from flux.testing import Cluster
from tests.integration.browser import screenshot

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(240)]

EXAMPLE = Path(__file__).parents[2] / "examples" / "flow_control.py"
WAIT_MS = 20_000


def _ok(result: object) -> str:
    assert result.returncode == 0, result.stderr  # type: ignore[attr-defined]
    return result.stdout  # type: ignore[attr-defined]


def test_the_limits_view_shows_a_named_limit_in_use_and_its_waiting_work(cluster: Cluster, browser) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    cluster.register(EXAMPLE)
    cluster.start_worker("w1", "--capacity", "4")
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{cluster.gateway_url}/ui/#/limits")
    page.get_by_label("API token").fill(cluster.token(Role.CLIENT))
    page.get_by_label("API token").press("Enter")
    # Nothing declared, nothing in use: the page says what would make one.
    expect(page.locator("#limits-none")).to_contain_text("flux limit create NAME")
    expect(page.locator("#limits-quiet")).to_have_text("No limit has work in it or waiting on it now.")

    _ok(cluster.flux("limit", "create", "openai", "--concurrency", "1", "--rate", "600/m", "--burst", "3"))
    ids = [_ok(cluster.flux("workflow", "run", "summarise", '{"seconds": 60}')).split()[0] for _ in range(2)]
    named = page.locator('table#limits tr[data-limit="openai"]')
    expect(named.locator('[data-role="terms"]')).to_have_text("concurrency 1 · rate 600/m (burst 3)")
    expect(named.locator('[data-role="keys"]')).to_contain_text("1 in use, 1 waiting")
    total = page.locator('table#limit-totals tr[data-limit="openai"]')
    expect(total.locator('[data-role="in-use"]')).to_have_text("1")
    expect(total.locator('[data-role="waiting"]')).to_have_text("1")
    screenshot(page, "dashboard-limits")

    for execution_id in ids:
        _ok(cluster.flux("workflow", "cancel", execution_id))
    # Both cancelled: the limit is idle and leaves the totals (status lists limits in use or waited on).
    expect(named.locator('[data-role="keys"]')).to_have_text("idle")
    expect(page.locator("#limits-quiet")).to_be_visible()
    page.close()
