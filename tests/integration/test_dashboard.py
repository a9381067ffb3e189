"""The dashboard at GET /ui, driven in a real headless chromium against a real cluster.

A server and two workers (one over gRPC, one over SSE through the gateway) run
as processes; the page is signed in with the API token and read through its
DOM: every wait is bounded (Playwright's expect timeouts), nothing asserts a
duration. Each view is saved as a screenshot under artifacts/ (path printed).
"""

from __future__ import annotations

import re

import httpx
import pytest

from flux.security import Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2
from tests.integration.browser import screenshot
from tests.integration.conftest import WORKFLOWS

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(240)]

WAIT_MS = 20_000
State = control_pb2.ExecutionState


def _expect():  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    return expect


def _open(chromium, cluster: Cluster, requests: list) -> object:  # type: ignore[no-untyped-def]
    page = chromium.new_page(viewport={"width": 1440, "height": 900})
    page.on("request", lambda request: requests.append(request))
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{cluster.gateway_url}/ui")
    return page


def _sign_in(page, token: str) -> None:  # type: ignore[no-untyped-def]
    # From the keyboard: the labelled field, then Enter.
    page.get_by_label("API token").fill(token)
    page.get_by_label("API token").press("Enter")


def _state(cluster: Cluster, execution_id: str) -> int:
    return cluster.client.get(execution_id).state


def test_dashboard_shows_where_work_is_and_acts_on_it(cluster: Cluster, browser) -> None:  # noqa: F811
    expect = _expect()
    cluster.start_worker("w-grpc", "--cpus", "4", "--memory", "8Gi", "--label", "role=training", gpus="2")
    cluster.start_worker("w-sse", "--cpus", "2", "--memory", "4Gi", gateway=cluster.gateway_url)
    requests: list = []
    page = _open(browser, cluster, requests)
    token = cluster.token(Role.CLIENT)

    # A wrong token is refused on the form, and nothing of the fleet shows.
    _sign_in(page, "not-the-token")
    expect(page.locator("#signin-error")).to_contain_text("refused")
    expect(page.locator("#nav")).to_be_hidden()
    _sign_in(page, token)

    # Fleet: both workers, their transports, connected, idle.
    for name, transport in (("w-grpc", "grpc"), ("w-sse", "sse")):
        row = page.locator(f'tr[data-worker="{name}"]')
        expect(row).to_have_attribute("data-state", "connected")
        expect(row.locator("td").nth(1)).to_have_text(transport)
        expect(row.locator('[data-resource="gpu"]')).to_have_attribute("data-reserved", "0")
    expect(page.locator('tr[data-worker="w-grpc"] .chip')).to_have_text("role=training")

    # Work that runs: its GPU reservation shows on the worker's gpu bar and in its running count.
    # (GPUs, not cores: the observed free cores of a loaded test machine could keep it waiting.)
    gpu = 'tr[data-worker="w-grpc"] [data-resource="gpu"]'
    expect(page.locator(gpu)).to_have_attribute("data-total", "2")
    expect(page.locator(gpu)).to_have_attribute("data-free", "2")
    running = cluster.run("holds_gpu", 120, wait=False).execution_id
    worker = eventually(
        lambda: (e := cluster.client.get(running)).state == State.EXECUTION_STATE_RUNNING and e.worker,
        what="holds_gpu to run",
    )
    assert worker == "w-grpc"
    row = page.locator(f'tr[data-worker="{worker}"]')
    expect(row.locator('[data-resource="gpu"]')).to_have_attribute("data-reserved", "1")
    expect(row.locator('[data-resource="gpu"]')).to_have_attribute("data-free", "1")
    expect(row.locator('[data-role="running"]')).to_have_text(re.compile(r"^1 / \d+$"))
    screenshot(page, "dashboard-fleet")

    # Work that waits: 8 cores fit neither worker; the queue says so, and why per worker.
    waiting = cluster.run("needs_cpu_8", None, wait=False).execution_id
    page.get_by_role("link", name="Queue").click()
    shape = page.locator('#queue tr[data-workflow="needs_cpu_8"]')
    expect(shape).to_have_attribute("data-reason", "infeasible")
    expect(shape.locator('[data-role="count"]')).to_have_text("1")
    why = shape.get_by_role("button", name=re.compile("Why is needs_cpu_8 waiting"))
    why.focus()
    page.keyboard.press("Enter")
    expect(why).to_have_attribute("aria-expanded", "true")
    for name in ("w-grpc", "w-sse"):
        expect(page.locator(f'[data-explain="{waiting}"] tr[data-verdict="{name}"]')).to_contain_text(
            "insufficient_cpu"
        )
    expect(page.locator(f'#queue-executions tr[data-execution="{waiting}"]')).to_be_visible()
    screenshot(page, "dashboard-queue")

    # Work that fails: listed as failed, its detail shows the error and traceback.
    failed = cluster.run("boom", "kaput", wait=True).execution_id
    assert _state(cluster, failed) == State.EXECUTION_STATE_FAILED
    page.get_by_role("link", name="Executions").click()
    page.get_by_label("State").select_option("FAILED")
    failed_row = page.locator(f'#executions tr[data-execution="{failed}"]')
    expect(failed_row).to_have_attribute("data-state", "FAILED")
    expect(page.locator('#executions tr[data-state]:not([data-state="FAILED"])')).to_have_count(0)
    screenshot(page, "dashboard-executions")
    failed_row.get_by_role("link", name=failed).click()
    expect(page.locator("#detail-state")).to_have_text("failed")
    expect(page.locator("#error-message")).to_contain_text("RuntimeError")
    expect(page.locator("#traceback")).to_contain_text("boom: kaput")
    expect(page.locator('[data-step="failed"]')).to_have_attribute("data-reached", "true")
    screenshot(page, "dashboard-execution")

    # The waiting one's detail explains it; the running one is cancelled from its page.
    page.goto(f"{cluster.gateway_url}/ui/#/executions/{waiting}")
    expect(page.locator(f'[data-explain="{waiting}"]')).to_contain_text("0/2 workers")
    page.goto(f"{cluster.gateway_url}/ui/#/executions/{running}")
    expect(page.locator('[data-field="worker"]')).to_have_text(worker)
    expect(page.locator('[data-field="gpus"]')).to_have_text(re.compile(r"^[01]$"))
    page.get_by_role("button", name=f"Cancel execution {running}").click()
    expect(page.locator("#detail-state")).to_have_text("cancelled")
    assert _state(cluster, running) == State.EXECUTION_STATE_CANCELLED

    # Pause and resume a worker from the fleet; the core agrees each time.
    page.get_by_role("link", name="Fleet").click()
    expect(row.locator('[data-resource="gpu"]')).to_have_attribute("data-reserved", "0")
    page.get_by_role("button", name="Pause worker w-sse").click()
    expect(page.locator('tr[data-worker="w-sse"]')).to_have_attribute("data-state", "paused")
    assert next(w for w in cluster.client.workers().workers if w.name == "w-sse").paused
    page.get_by_role("button", name="Resume worker w-sse").click()
    expect(page.locator('tr[data-worker="w-sse"]')).to_have_attribute("data-state", "connected")
    assert not next(w for w in cluster.client.workers().workers if w.name == "w-sse").paused

    # The token went in headers only: never in any URL the page asked for.
    assert requests and not [r.url for r in requests if token in r.url]
    api_calls = [r for r in requests if "/ui/" not in r.url]
    assert api_calls and all(
        r.headers.get("authorization") == f"Bearer {token}" for r in api_calls if r.method == "POST"
    )
    page.close()


def test_the_page_is_served_without_a_token_and_holds_no_data(cluster: Cluster) -> None:
    with httpx.Client(base_url=cluster.gateway_url, trust_env=False, timeout=10) as http:
        redirect = http.get("/ui")
        assert redirect.status_code == 308 and redirect.headers["location"] == "/ui/"
        page = http.get("/ui/")
        assert page.status_code == 200 and 'id="signin-form"' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert http.get("/ui/js/app.js").headers["content-type"].startswith("text/javascript")
        # Data stays behind the token.
        assert http.get("/status").status_code == 401


def test_any_replica_page_shows_the_whole_fleet_and_queue(tmp_path, pg_url: str, browser) -> None:  # noqa: F811
    expect = _expect()
    cluster = Cluster(tmp_path, db=pg_url)
    try:
        cluster.start_server("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
        other = cluster.start_replica("--ack-deadline", "2", "--grace-period", "2", "--safety-tick", "1")
        cluster.register(WORKFLOWS)
        cluster.start_worker("on-a", "--cpus", "2", servers=[cluster.address])
        cluster.start_worker("on-b", "--cpus", "2", servers=[other])
        # Submitted to the first replica; the page is the second replica's.
        waiting = cluster.run("needs_cpu_8", None, wait=False).execution_id
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{cluster.replicas[0][2]}/ui")
        _sign_in(page, cluster.token(Role.CLIENT))
        for name in ("on-a", "on-b"):
            expect(page.locator(f'tr[data-worker="{name}"]')).to_have_attribute("data-state", "connected")
        page.get_by_role("link", name="Queue").click()
        expect(page.locator('#queue tr[data-workflow="needs_cpu_8"] [data-role="count"]')).to_have_text("1")
        expect(page.locator(f'#queue-executions tr[data-execution="{waiting}"]')).to_be_visible()
        page.close()
    finally:
        cluster.close()


def test_a_refused_action_stays_on_screen_across_refreshes(cluster: Cluster, browser) -> None:  # noqa: F811
    expect = _expect()
    gone = cluster.start_worker("gone")
    cluster.start_worker("other")  # its pauses make fleet events, so the page reads /workers again
    token = cluster.token(Role.CLIENT)
    page = _open(browser, cluster, [])
    _sign_in(page, token)
    expect(page.locator('tr[data-worker="gone"]')).to_have_attribute("data-state", "connected")
    # The page keeps listing the worker as it was (a stale view), while the operator drops it.
    with httpx.Client(base_url=cluster.gateway_url, trust_env=False, timeout=10) as http:
        headers = {"Authorization": f"Bearer {token}"}
        listing = http.get("/workers", headers=headers).content
        page.route("**/workers", lambda route: route.fulfill(body=listing, content_type="application/json"))
        # The page reads /workers one read at a time: of two reads from now, the second is routed,
        # so no real read started before the route can answer after the worker is forgotten.
        for action in ("pause", "resume"):
            with page.expect_response(lambda response: response.url.endswith("/workers")):
                assert http.post(f"/workers/other/{action}", headers=headers).status_code == 200
        # Stopped first: a live worker that is forgotten registers again, and its pause would succeed.
        gone.kill()
        gone.wait(timeout=10)
        assert http.post("/workers/gone/forget", headers=headers).status_code == 200
    page.get_by_role("button", name="Pause worker gone").click()
    problem = page.locator("#problem")
    expect(problem).to_contain_text("Pause gone")
    expect(problem).to_contain_text("'gone' is not known")
    # A successful re-read of the fleet does not wipe it.
    with (
        httpx.Client(base_url=cluster.gateway_url, trust_env=False, timeout=10) as http,
        page.expect_response(lambda response: response.url.endswith("/workers")),
    ):
        assert (
            http.post("/workers/other/pause", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        )
    expect(problem).to_be_visible()
    expect(problem).to_contain_text("'gone' is not known")
    page.close()


def test_a_server_without_auth_needs_no_sign_in(tmp_path, browser) -> None:  # noqa: F811
    expect = _expect()
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--insecure")
        cluster.start_worker("open")
        page = browser.new_page()
        page.goto(f"{cluster.gateway_url}/ui")
        expect(page.locator('tr[data-worker="open"]')).to_have_attribute("data-state", "connected")
        expect(page.locator("#signin")).to_be_hidden()
        page.close()
    finally:
        cluster.close()


def test_a_batch_member_s_page_shows_the_batch_s_progress(cluster: Cluster, browser) -> None:  # noqa: F811
    expect = _expect()
    cluster.start_worker("w1", "--capacity", "4")
    runs = cluster.client.map("echo", [1, 2, 3], max_concurrent=1)
    assert cluster.client.batches.wait(runs.batch_id, timeout=60).completed == 3
    page = _open(browser, cluster, [])
    _sign_in(page, cluster.token(Role.CLIENT))
    page.goto(f"{cluster.gateway_url}/ui/#/executions/{runs[1].execution_id}")
    progress = page.locator("#batch-progress")
    expect(progress).to_contain_text(runs.batch_id)
    expect(progress).to_contain_text("3/3 finished · 0 running (max 1) · 0 waiting")
    expect(progress).to_have_attribute("data-finished", "true")
    screenshot(page, "dashboard-batch")
