"""The dashboard's execution view shows what an execution waits on (issue 44), in a real headless
chromium against a real cluster: its dependencies linked, how many it still waits for, and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.security import Role
from tests.integration.browser import screenshot
from tests.integration.test_dashboard import _expect, _open, _sign_in

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(240)]

WORKFLOWS = Path(__file__).with_name("dependency_workflows.py")


def test_the_execution_view_shows_its_dependencies(cluster, browser, tmp_path: Path) -> None:
    expect = _expect()
    cluster.register(WORKFLOWS)
    cluster.start_worker("w1", "--capacity", "4")
    gate = tmp_path / "gate"
    first = cluster.client.run("gated", {"gate": str(gate)})
    waiting = cluster.client.run("downstream", None, after=[first])

    page = _open(browser, cluster, [])
    _sign_in(page, cluster.token(Role.CLIENT))
    page.goto(f"{cluster.gateway_url}/ui#/executions/{waiting.execution_id}")
    expect(page.locator("#detail-state")).to_have_text("created")
    shown = page.locator("#dependencies")
    expect(shown).to_contain_text("waiting for 1 of 1 (succeeded)")
    expect(shown.locator("a")).to_have_attribute("href", f"#/executions/{first.execution_id}")
    expect(page.locator("#detail-body")).to_contain_text("waiting for 1 of 1 dependency: ")
    screenshot(page, "dashboard-dependencies")

    gate.touch()
    cluster.client.wait(waiting.execution_id, 60)
    page.reload()
    expect(page.locator("#detail-state")).to_have_text("completed")
    expect(page.locator("#dependencies")).to_contain_text("after (succeeded)")
