"""The dashboard's Schedules view, in a real headless chromium against a real cluster: the
tenant's schedules with their next and last ticks, updated as ticks fire (each run is an
execution, so the fleet feed re-reads the view). Every wait is bounded (Playwright's expect)."""

from __future__ import annotations

import pytest

from flux.security import Role
from tests.integration.browser import screenshot

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(240)]

WAIT_MS = 20_000


def test_the_schedules_view_shows_next_and_last_ticks(cluster, browser) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    schedules = cluster.client.schedules
    schedules.create("nightly", workflow="echo", cron="0 2 * * *", timezone="Europe/Paris")
    schedules.create("often", workflow="echo", every="1s", overlap="allow")
    schedules.create("sleeping", workflow="echo", every="1h")
    schedules.pause("sleeping")

    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{cluster.gateway_url}/ui")
    page.get_by_label("API token").fill(cluster.token(Role.CLIENT))
    page.get_by_label("API token").press("Enter")
    page.get_by_role("link", name="Schedules").click()
    table = page.locator("table#schedules")
    expect(table.locator("tbody tr")).to_have_count(3)
    assert table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.schedule)") == [
        "nightly", "often", "sleeping",
    ]  # fmt: skip
    nightly = table.locator('tr[data-schedule="nightly"]')
    expect(nightly.locator('[data-role="when"]')).to_have_text("cron 0 2 * * * (Europe/Paris)")
    expect(nightly.locator('[data-role="next"]')).to_contain_text("(in ")
    expect(table.locator('tr[data-schedule="sleeping"] [data-role="next"]')).to_have_text("paused")
    # The every-second schedule's last tick moves as its runs are submitted (the live feed re-reads).
    last = table.locator('tr[data-schedule="often"] [data-role="last"]')
    first = last.inner_text()
    expect(last).not_to_have_text(first)
    screenshot(page, "dashboard-schedules")
