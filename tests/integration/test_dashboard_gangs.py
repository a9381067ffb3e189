"""The dashboard's execution view lists a gang's members, in a real headless chromium against a
real cluster: each member's rank, worker, address, GPUs and state; a gang that waits says it is
not placed."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.security import Role
from flux.testing import Cluster
from tests.integration.browser import screenshot
from tests.integration.test_dashboard import _expect, _open, _sign_in

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(240)]

EXAMPLE = Path(__file__).parents[2] / "examples" / "gangs.py"


def test_the_execution_view_lists_a_gangs_members(cluster: Cluster, browser) -> None:
    expect = _expect()
    cluster.register(EXAMPLE)
    cluster.start_worker("g1", "--advertise-address", "10.0.0.1")
    cluster.start_worker("g2", "--advertise-address", "10.0.0.2")
    done = cluster.client.run("hello_gang", "Hi", wait=True, timeout=60)
    waiting = cluster.client.run("rack_local", None).execution_id  # no worker has the label rack

    page = _open(browser, cluster, [])
    _sign_in(page, cluster.token(Role.CLIENT))
    page.goto(f"{cluster.gateway_url}/ui#/executions/{done.execution_id}")
    expect(page.locator("#detail-state")).to_have_text("completed")
    rows = page.locator("#gang-members tbody tr")
    expect(rows).to_have_count(2)
    for rank, member in enumerate(done.gang_members):
        cells = rows.nth(rank).locator("td")
        expect(cells.nth(0)).to_have_text(f"{rank} (leader)" if rank == 0 else str(rank))
        expect(cells.nth(1)).to_have_text(member.worker)
        expect(cells.nth(2)).to_have_text({"g1": "10.0.0.1", "g2": "10.0.0.2"}[member.worker])
        expect(cells.nth(4)).to_have_text("completed")
    expect(page.get_by_role("heading", name="Gang of 2")).to_be_visible()
    screenshot(page, "dashboard-gang")

    page.goto(f"{cluster.gateway_url}/ui#/executions/{waiting}")
    expect(page.locator("#detail-state")).to_have_text("created")
    expect(page.locator("#gang-pending")).to_contain_text("Not placed")
    page.close()
