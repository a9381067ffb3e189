"""The dashboard's execution view lists the attempts, in a real headless chromium against a real
cluster: each ended try (worker, start, end, reason, error) and, while a retry waits, its next try."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux import Retry
from flux.security import Role
from flux.testing import Cluster, eventually
from tests.integration.browser import screenshot
from tests.integration.test_dashboard import _expect, _open, _sign_in

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(240)]

EXAMPLE = Path(__file__).parents[2] / "examples" / "over_time.py"


def test_the_execution_view_lists_its_attempts_and_the_next_try(cluster: Cluster, browser) -> None:
    expect = _expect()
    cluster.register(EXAMPLE)
    cluster.start_worker("w1")
    # flaky fails its first two tries with ConnectionResetError; waits of 0.3 s then 0.6 s.
    done = cluster.run("flaky", wait=True, timeout=60).execution_id
    # The same body told to wait a minute before its second try: caught waiting.
    slow_retry = Retry(max_attempts=3, initial_delay="60s", jitter=False, retry_on=["ConnectionError"])
    waiting = cluster.client.run("flaky", retry=slow_retry).execution_id
    eventually(lambda: len(cluster.client.get(waiting).attempts) == 1, timeout=30, what="the first try ended")

    page = _open(browser, cluster, [])
    _sign_in(page, cluster.token(Role.CLIENT))

    page.goto(f"{cluster.gateway_url}/ui#/executions/{done}")
    expect(page.locator("#detail-state")).to_have_text("completed")
    rows = page.locator("#attempts tbody tr")
    expect(rows).to_have_count(3)
    first = rows.nth(0)
    expect(first).to_have_attribute("data-reason", "error")
    cells = first.locator("td")
    expect(cells.nth(0)).to_have_text("1 of 3")
    expect(cells.nth(1)).to_have_text("w1")
    expect(cells.nth(4)).to_have_text("error")
    expect(cells.nth(5)).to_have_text("ConnectionResetError: reset")
    for cell in (cells.nth(2), cells.nth(3)):  # started and ended: times, not dashes
        expect(cell).not_to_have_text("—")
    expect(rows.nth(2)).to_have_attribute("data-reason", "completed")
    expect(rows.nth(2).locator("td").nth(5)).to_have_text("—")
    expect(page.locator("#next-try")).to_have_count(0)
    screenshot(page, "dashboard-attempts")

    page.goto(f"{cluster.gateway_url}/ui#/executions/{waiting}")
    expect(page.locator("#detail-state")).to_have_text("created")
    expect(page.locator("#attempts tbody tr")).to_have_count(1)
    expect(page.locator("#next-try")).to_contain_text("Attempt 2 waits to be tried: next try at")
    expect(page.locator("#next-try")).to_contain_text(" (in ")
    not_before = cluster.client.get(waiting).not_before_ms
    expect(page.locator("#next-try")).to_have_attribute("data-at", str(not_before))
    screenshot(page, "dashboard-attempts-waiting")
    page.close()
