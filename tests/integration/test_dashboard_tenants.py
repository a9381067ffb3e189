"""The dashboard's Tenants view, in a real headless chromium against a real cluster.

Tenants and their quotas are made with the CLI, work runs with a tenant's own
token, and the page is read through its DOM: a cluster-admin token sees every tenant
that status reports, a tenant's token the tenant it is signed in as. GET /status
says whose token it is in its X-Flux-Tenant and X-Flux-Role headers, from the
in-process gateway and from one started on its own alike. Every wait is bounded
(Playwright's expect timeouts, ``eventually``); nothing asserts a duration.
"""

from __future__ import annotations

import httpx
import pytest

from flux.client import FluxClient
from flux.security import Credentials, Role
from flux.testing import Cluster, eventually
from flux.v1 import control_pb2
from tests.integration.browser import screenshot

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(240)]

WAIT_MS = 20_000
RUNNING = (control_pb2.EXECUTION_STATE_SCHEDULED, control_pb2.EXECUTION_STATE_RUNNING)
CREATED = control_pb2.EXECUTION_STATE_CREATED


def _expect():  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    return expect


def _ok(result: object) -> str:
    assert result.returncode == 0, result.stderr  # type: ignore[attr-defined]
    return result.stdout  # type: ignore[attr-defined]


def _client(cluster: Cluster, token: str) -> FluxClient:
    return FluxClient(cluster.address, timeout=10, credentials=Credentials(token, cluster.ca))


def _sign_in(page, token: str) -> None:  # type: ignore[no-untyped-def]
    page.get_by_label("API token").fill(token)
    page.get_by_label("API token").press("Enter")


def _meter(row, resource: str):  # type: ignore[no-untyped-def]
    return row.locator(f'[data-resource="{resource}"] [data-role="amount"]')


def test_the_tenants_view_shows_usage_against_quota_for_an_admin_and_for_a_tenant(
    cluster: Cluster, browser
) -> None:
    expect = _expect()
    # GPUs, not cores: a loaded test machine's observed free cores could keep work waiting.
    cluster.start_worker("w1", "--cpus", "4", "--memory", "8Gi", gpus="4")
    _ok(cluster.flux("tenant", "create", "ml", "--gpu", "1", "--memory", "4Gi"))
    _ok(cluster.flux("tenant", "create", "web", "--cpu", "8", "--gpu-memory", "80Gi", "--cohort", "research"))
    _ok(cluster.flux("tenant", "create", "ops"))  # no terms of its own
    ml = _ok(cluster.flux("token", "create", "--tenant", "ml")).strip()
    ops = _ok(cluster.flux("token", "create", "--tenant", "ops", "--role", "read")).strip()

    with _client(cluster, ml) as as_ml:
        # Three of one GPU each, on a worker with four: ml's quota of one lets one run, two wait.
        mine = [as_ml.run("holds_gpu", 120).execution_id for _ in range(3)]
        eventually(lambda: sum(as_ml.get(i).state in RUNNING for i in mine) == 1, what="one of ml's running")
        assert sum(as_ml.get(i).state == CREATED for i in mine) == 2

        # The admin (the server's own token, tenant default): every tenant status reports.
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{cluster.gateway_url}/ui")
        _sign_in(page, cluster.token(Role.CLIENT))
        expect(page.locator("#caller")).to_have_text("Signed in as tenant default · cluster-admin token")
        page.get_by_role("link", name="Tenants").click()
        table = page.locator("table#tenants")
        expect(table.locator("tbody tr")).to_have_count(4)
        assert table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.tenant)") == [
            "default", "ml", "ops", "web",
        ]  # fmt: skip
        row = table.locator('tr[data-tenant="ml"]')
        expect(_meter(row, "gpu")).to_have_text("gpu 1 of 1")
        expect(_meter(row, "memory")).to_have_text("memory 0 B of 4.0 GiB")
        expect(_meter(row, "cpu")).to_have_text("cpu 0 used · no limit")
        expect(_meter(row, "gpu_memory")).to_have_text("gpu_memory 0 B used · no limit")
        expect(row.locator('[data-role="pending"]')).to_have_text("2")
        web = table.locator('tr[data-tenant="web"]')
        expect(_meter(web, "cpu")).to_have_text("cpu 0 of 8")
        expect(_meter(web, "gpu_memory")).to_have_text("gpu_memory 0 B of 80 GiB")
        expect(_meter(web, "gpu")).to_have_text("gpu 0 used · no limit")
        expect(web.locator('[data-role="pending"]')).to_have_text("0")
        for resource in ("cpu", "memory", "gpu", "gpu_memory"):
            expect(_meter(table.locator('tr[data-tenant="ops"]'), resource)).to_contain_text("no limit")
        screenshot(page, "dashboard-tenants-admin")
        page.close()

        # ml's own token: the page says who it is and shows ml alone, live as ml's work changes.
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{cluster.gateway_url}/ui/#/tenants")
        _sign_in(page, ml)
        expect(page.locator("#caller")).to_have_text("Signed in as tenant ml · submit token")
        expect(page.locator("#tenants-scope")).to_contain_text("Signed in as tenant ml with a submit token")
        own = page.locator("table#tenant-own")
        expect(own.locator("tbody tr")).to_have_count(1)
        row = own.locator('tr[data-tenant="ml"]')
        expect(_meter(row, "gpu")).to_have_text("gpu 1 of 1")
        expect(row.locator('[data-role="pending"]')).to_have_text("2")
        expect(page.locator('tr[data-tenant="web"], tr[data-tenant="default"]')).to_have_count(0)
        expect(page.locator("table#tenants")).to_have_count(0)
        screenshot(page, "dashboard-tenants-tenant")
        for execution_id in mine:
            as_ml.cancel(execution_id)
        # Cancelled: nothing held, nothing waiting, as the fleet feed tells the page.
        expect(_meter(row, "gpu")).to_have_text("gpu 0 of 1")
        expect(row.locator('[data-role="pending"]')).to_have_text("0")
        page.close()

    # A read token of a tenant without terms: its own row, every resource without a limit.
    page = browser.new_page()
    page.goto(f"{cluster.gateway_url}/ui/#/tenants")
    _sign_in(page, ops)
    expect(page.locator("#caller")).to_have_text("Signed in as tenant ops · read token")
    row = page.locator('table#tenant-own tr[data-tenant="ops"]')
    expect(_meter(row, "gpu")).to_have_text("gpu 0 used · no limit")
    expect(page.locator("tr[data-tenant]")).to_have_count(1)
    # Once no tenant has terms, status lists none: the page says so rather than show nothing.
    _ok(cluster.flux("tenant", "delete", "ml"))
    _ok(cluster.flux("tenant", "delete", "web"))
    page.reload()
    expect(page.locator("#tenants-empty")).to_have_text(
        "No tenant has terms now (a quota, a cohort or a weight): nothing tenant ops runs has a limit."
    )
    expect(page.locator("tr[data-tenant]")).to_have_count(0)
    page.close()


def test_status_names_the_callers_tenant_and_role_in_headers(cluster: Cluster) -> None:
    _ok(cluster.flux("tenant", "create", "ml", "--cpu", "2"))
    reader = _ok(cluster.flux("token", "create", "--tenant", "ml", "--role", "read")).strip()
    admin = _ok(cluster.flux("token", "create", "--tenant", "ml", "--role", "admin")).strip()
    gateway, standalone = cluster.start_gateway()
    try:
        # The gateway beside the core (an in-process channel) and one on its own (a gRPC channel).
        for url in (cluster.gateway_url, standalone):
            with httpx.Client(base_url=url, trust_env=False, timeout=10) as http:
                for token, tenant, role, shown in (
                    (cluster.token(Role.CLIENT), "default", "cluster-admin", ["default", "ml"]),
                    (reader, "ml", "read", ["ml"]),  # a tenant's token: its own usage only
                    (admin, "ml", "admin", ["ml"]),  # a tenant's admin too: it is no cluster admin
                ):
                    answer = http.get("/status", headers={"Authorization": f"Bearer {token}"})
                    assert answer.status_code == 200, answer.text
                    assert (answer.headers["x-flux-tenant"], answer.headers["x-flux-role"]) == (tenant, role)
                    # The body is ClusterStatus as before: the caller is not in it.
                    assert "caller" not in answer.json()
                    assert [t["name"] for t in answer.json()["tenants"]] == shown
                refused = http.get("/status", headers={"Authorization": "Bearer not-a-token"})
                assert refused.status_code == 401 and "x-flux-tenant" not in refused.headers
    finally:
        gateway.terminate()
        gateway.wait(timeout=10)
