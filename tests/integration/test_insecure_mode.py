"""A server without auth (--insecure) against pages on other sites: Host names, cross-site writes, framing.

An outside review forgot a worker from a page on another loopback origin with
``fetch(".../workers/w9/forget", {method: "POST", mode: "no-cors"})`` and saw any Host header
answered. Real server processes on 127.0.0.1:0; the browser test drives the system's headless
chromium against a second origin served here.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flux.testing import Cluster, eventually
from tests.integration.browser import screenshot

pytestmark = [pytest.mark.integration, pytest.mark.transports("grpc"), pytest.mark.timeout(240)]

WAIT_MS = 20_000


@pytest.fixture
def insecure(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--insecure", "--allowed-host", "flux.test")
        yield cluster
    finally:
        cluster.close()


def _http(cluster: Cluster) -> httpx.Client:
    return httpx.Client(base_url=cluster.gateway_url, timeout=10, trust_env=False)


def _workers(http: httpx.Client) -> list[str]:
    answer = http.get("/workers")
    assert answer.status_code == 200, answer.text
    return [w["name"] for w in answer.json()["workers"]]


def test_only_the_bound_names_and_allowed_hosts_are_answered(insecure: Cluster) -> None:
    port = insecure.gateway_url.rsplit(":", 1)[1]
    with _http(insecure) as http:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "flux.test", f"FLUX.TEST:{port}"):
            assert http.get("/healthz", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example", f"evil.example:{port}", "flux.test.evil.example", "127.0.0.2"):
            refused = http.get("/workers", headers={"Host": host})
            assert refused.status_code == 403, (host, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "PERMISSION_DENIED"
            assert "does not name this gateway" in error["message"] and "--allowed-host" in error["message"]


def test_a_state_change_needs_a_header_a_cross_site_page_cannot_send(insecure: Cluster) -> None:
    insecure.start_worker("w9")
    with _http(insecure) as http:
        # What a form or a no-cors fetch can send: nothing, a form body, text/plain.
        for headers, body in (
            ({}, None),
            ({"Content-Type": "application/x-www-form-urlencoded"}, b"a=1"),
            ({"Content-Type": "text/plain"}, b"{}"),
        ):
            refused = http.post("/workers/w9/forget", headers=headers, content=body)
            assert refused.status_code == 403, refused.text
            assert "a header a cross-site page cannot send" in refused.json()["error"]["message"]
        assert "w9" in _workers(http)
        # Reads are untouched, and a caller that can set headers gets through.
        paused = http.post("/workers/w9/pause", headers={"X-Flux-Request": "1"})
        assert paused.status_code == 200, paused.text
        resumed = http.post("/workers/w9/resume", json={})  # a JSON body: what the dashboard sends
        assert resumed.status_code == 200, resumed.text


PAGES = ["/ui", "/docs", "/redoc", "/openapi.json", "/healthz", "/metrics", "/no/such/page", "/workers"]


@pytest.mark.parametrize("auth", ["insecure", "tokens"])
def test_no_page_can_be_framed(tmp_path: Path, auth: str) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server(*(["--insecure"] if auth == "insecure" else []))
        with _http(cluster) as http:
            for path in PAGES:
                answer = http.get(path)
                assert answer.headers.get("x-frame-options") == "DENY", path
                policies = answer.headers.get_list("content-security-policy")
                assert len(policies) == 1 and "frame-ancestors 'none'" in policies[0], (path, policies)
            # The dashboard and /docs keep their own policy, with the directive added once.
            docs = http.get("/docs").headers["content-security-policy"]
            assert docs.startswith("default-src 'self'") and docs.count("frame-ancestors") == 1
    finally:
        cluster.close()


# ----------------------------------------------------------------- in a real browser

ATTACK = """<!doctype html><title>loading</title>
<script>
const gateway = "%s";
fetch(gateway + "/workers/w9/forget", {method: "POST", mode: "no-cors"})
  .then(() => fetch(gateway + "/workers/w9/pause", {method: "POST", mode: "no-cors",
         headers: {"Content-Type": "application/json", "X-Flux-Request": "1"}, body: "{}"}))
  .then(() => { document.title = "sent"; }, () => { document.title = "sent"; });
</script>
<form id="f" method="POST" action="%s/workers/w9/forget" target="sink"></form>
<iframe name="sink"></iframe>
"""


@pytest.fixture
def other_origin() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A second loopback origin (another port) serving the pages put in the returned dict."""
    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", pages
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_on_another_origin_cannot_forget_a_worker_and_the_dashboard_still_works(
    insecure: Cluster, other_origin: tuple[str, dict[str, bytes]], browser
) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    insecure.start_worker("w9")
    origin, pages = other_origin
    pages["/attack.html"] = (ATTACK % (insecure.gateway_url, insecure.gateway_url)).encode()
    attacker = browser.new_page()
    answers: list[tuple[str, int]] = []
    attacker.on("response", lambda r: answers.append((r.url, r.status)))
    attacker.goto(f"{origin}/attack.html")
    expect(attacker).to_have_title("sent")
    attacker.evaluate("document.getElementById('f').submit()")  # a plain cross-site form post too
    eventually(lambda: any(url.endswith("/workers/w9/forget") for url, _ in answers[1:]), timeout=20)
    screenshot(attacker, "insecure_cross_site_attempt")
    attacker.close()
    forgets = [status for url, status in answers if url.endswith("/forget")]
    # The no-cors answers are opaque to the page (status 0 there); the form's frame sees 403.
    assert forgets and all(status in (0, 403) for status in forgets), answers
    with _http(insecure) as http:
        [worker] = [w for w in http.get("/workers").json()["workers"] if w["name"] == "w9"]
        assert not worker.get("paused", False)  # no-cors stripped the pause's headers: refused too

    # The dashboard, same-origin, still works without sign-in: it pauses and resumes the worker.
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{insecure.gateway_url}/ui")
    row = page.locator('tr[data-worker="w9"]')
    expect(row).to_have_attribute("data-state", "connected")
    page.get_by_role("button", name="Pause worker w9").click()
    expect(row).to_have_attribute("data-state", "paused")
    screenshot(page, "insecure_dashboard_paused")
    page.get_by_role("button", name="Resume worker w9").click()
    expect(row).to_have_attribute("data-state", "connected")
    page.close()
