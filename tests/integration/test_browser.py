"""The gateway from a real browser: headless Chromium, pages served from another origin.

Each page is served by a small HTTP server on 127.0.0.1 (its own port, so its own
origin) and uses only what a browser gives a page: fetch and its own EventSource,
with no header injected by the test driver. The gateway allows one page origin
with --cors-origin; a second page server plays a site that is not on the list.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flux.security import Role
from flux.testing import Cluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

WORKFLOWS = Path(__file__).with_name("workflows.py")

# What the pages run. Everything goes through fetch and EventSource, as on any site.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>flux page</title></head><body>
<pre id="log"></pre>
<script>
const log = (line) => { document.getElementById("log").textContent += line + "\\n"; };
window.seen = []; window.opens = 0; window.outputs = []; window.errors = [];

async function call(base, path, headers, body) {
  const answer = await fetch(base + path, {
    method: "POST", headers: {"Content-Type": "application/json", ...headers}, body: JSON.stringify(body ?? {}),
  });
  const text = await answer.text();
  if (!answer.ok) throw new Error(answer.status + " " + text);
  return JSON.parse(text);
}

// A worker in a page: register, mint a ticket, take dispatches from its own EventSource.
async function startWorker(base, workerToken, name) {
  const auth = {Authorization: "Bearer " + workerToken};
  const resources = {cpu_total: 2, cpu_available: 2, memory_total: "1Gi", memory_available: "1Gi"};
  const {session_token} = await call(base, "/workers/register", auth, {name, resources});
  const session = {...auth, "X-Flux-Session": session_token};
  const {url} = await call(base, "/tickets", session, {scope: "worker", worker: name});
  const source = new EventSource(base + url);
  source.addEventListener("connected", () => { window.opens += 1; log("connected"); });
  source.addEventListener("execution_scheduled", async (event) => {
    const job = JSON.parse(event.data);
    const where = "/" + job.execution_id;
    await call(base, "/workers/" + name + "/claim" + where, session, {generation: job.generation});
    const output = {from: "browser", input: JSON.parse(job.input_json)};
    await call(base, "/workers/" + name + "/complete" + where, session,
               {generation: job.generation, output_json: JSON.stringify(output)});
    window.outputs.push(output);
  });
  source.onerror = () => window.errors.push("worker stream error");
}

// An observer: follow one execution to its final state, minting a new ticket to reconnect.
function watch(base, apiToken, executionId) {
  let last = null;
  const open = async () => {
    let ticket;
    while (!ticket) {
      try {
        ticket = await call(base, "/tickets", {Authorization: "Bearer " + apiToken},
                            {scope: "execution", execution_id: executionId});
      } catch (e) { await new Promise((r) => setTimeout(r, 200)); }  // the gateway is away
    }
    const source = new EventSource(base + ticket.url + (last ? "&last_event_id=" + last : ""));
    source.onopen = () => { window.opens += 1; };
    source.addEventListener("execution", (event) => {
      const execution = JSON.parse(event.data);
      last = event.lastEventId;
      window.seen.push({id: event.lastEventId, state: execution.state, output: execution.output_json});
      if (execution.state.match(/COMPLETED|FAILED|CANCELLED/)) source.close();
    });
    // A used ticket cannot reopen the stream: close it and come back with a new one.
    source.onerror = () => { source.close(); window.errors.push("watch stream dropped"); open(); };
  };
  open();
}

// A page on a site that is not on the list tries the same calls.
async function tryEverything(base, token) {
  const tried = {};
  try {
    await call(base, "/workers/register", {Authorization: "Bearer " + token}, {name: "intruder"});
    tried.register = "allowed";
  } catch (e) { tried.register = e.name + ": " + e.message; }
  try {
    await fetch(base + "/healthz");
    tried.healthz = "allowed";
  } catch (e) { tried.healthz = e.name + ": " + e.message; }
  tried.events = await new Promise((resolve) => {
    const source = new EventSource(base + "/events?ticket=whatever");
    source.onopen = () => { source.close(); resolve("allowed"); };
    source.onerror = () => { source.close(); resolve("error"); };
  });
  return tried;
}
</script></body></html>
"""


class _Page(http.server.BaseHTTPRequestHandler):
    # What this origin serves; a test may set it once it knows the gateway's address.
    pages: dict[int, str] = {}

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.pages.get(self.server.server_address[1], PAGE).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def page_server() -> Iterator[str]:
    """Serves PAGE on 127.0.0.1:0; yields its origin."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def site() -> Iterator[str]:
    with page_server() as origin:
        yield origin


@pytest.fixture
def cluster_for(tmp_path: Path, site: str) -> Iterator[Cluster]:
    """A server whose gateway lets pages from ``site`` call it, with the test workflows registered."""
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--cors-origin", site)
        cluster.register(WORKFLOWS)
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def page(browser: Any, site: str) -> Iterator[Any]:
    context = browser.new_context()
    opened = context.new_page()
    opened.goto(f"{site}/")
    try:
        yield opened
    finally:
        context.close()


def test_a_page_is_a_worker_with_its_own_eventsource(cluster_for: Cluster, page: Any) -> None:
    cluster = cluster_for
    page.evaluate(
        "([base, token]) => startWorker(base, token, 'page-worker')",
        [cluster.gateway_url, cluster.token(Role.WORKER)],
    )
    page.wait_for_function("window.opens === 1", timeout=30_000)
    workers = {w.name: w for w in cluster.client.workers().workers}
    assert workers["page-worker"].connected and workers["page-worker"].transport == "sse"

    execution = cluster.run("echo", {"n": 7}, timeout=60)
    assert json.loads(execution.output_json) == {"from": "browser", "input": {"n": 7}}
    assert execution.worker == "page-worker"
    page.wait_for_function("window.outputs.length === 1", timeout=30_000)  # its complete call returned
    assert page.evaluate("window.outputs") == [{"from": "browser", "input": {"n": 7}}]
    assert page.evaluate("window.errors") == []


def _readme_page() -> str:
    """The page of the site's "From a browser" guide (docs/guides/browsers.md), exactly as shown."""
    section = (Path(__file__).parents[2] / "docs" / "guides" / "browsers.md").read_text()
    return section[
        section.index("```html\n") + len("```html\n") : section.index("\n```", section.index("```html"))
    ]


def test_the_readme_page_is_a_worker(cluster_for: Cluster, site: str, browser: Any) -> None:
    cluster = cluster_for
    html = _readme_page()
    assert 'const base = "http://127.0.0.1:8080"' in html
    # Only the address differs from the README: the test's gateway listens on a port of its own.
    served = html.replace("http://127.0.0.1:8080", cluster.gateway_url)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept(cluster.token(Role.WORKER)))  # prompt("worker token")
        # The allowed origin serves the README's file (a page from loopback may call loopback).
        port = int(site.rsplit(":", 1)[1])
        _Page.pages[port] = served
        page.goto(f"{site}/")
        eventually(
            lambda: any(w.name == "browser-1" and w.connected for w in cluster.client.workers().workers),
            what="the README page's worker to connect",
        )
        execution = cluster.run("echo", "World", timeout=60)
        assert json.loads(execution.output_json) == {"greeting": "Hello from a browser, World!"}
        assert execution.worker == "browser-1"
    finally:
        _Page.pages.clear()
        context.close()


def test_a_page_watches_an_execution_through_a_reconnect(tmp_path: Path, site: str, page: Any) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start_server("--no-http")
        cluster.register(WORKFLOWS)
        # A gateway of its own, so the test can take it away under the page and bring it back.
        gateway, url = cluster.start_gateway("--cors-origin", site)
        port = url.rsplit(":", 1)[1]
        execution = cluster.run("echo", "hello", wait=False)  # no worker yet: it waits, CREATED

        page.evaluate(
            "([base, token, id]) => watch(base, token, id)",
            [url, cluster.token(Role.CLIENT), execution.execution_id],
        )
        page.wait_for_function("window.seen.length === 1", timeout=30_000)
        gateway.send_signal(signal.SIGKILL)
        gateway.wait(timeout=10)
        page.wait_for_function("window.errors.length >= 1", timeout=30_000)
        _, again = cluster.start_gateway("--cors-origin", site, "--port", port)
        assert again == url
        page.wait_for_function("window.opens === 2", timeout=30_000)

        cluster.start_worker("w1")  # now it runs, while the page watches through the new gateway
        page.wait_for_function("window.seen.some(e => e.state.endsWith('COMPLETED'))", timeout=60_000)
        seen = page.evaluate("window.seen")
        states = [e["state"].removeprefix("EXECUTION_STATE_") for e in seen]
        assert states == ["CREATED", "SCHEDULED", "RUNNING", "COMPLETED"], seen
        assert [e["id"] for e in seen] == ["0.0", "1.1", "1.2", "1.4"]
        assert json.loads(seen[-1]["output"]) == {"input": "hello", "worker": "w1"}
    finally:
        cluster.close()


def test_a_page_from_an_origin_not_on_the_list_is_refused(cluster_for: Cluster, browser: Any) -> None:
    cluster = cluster_for
    with page_server() as elsewhere:
        context = browser.new_context()
        try:
            intruder = context.new_page()
            intruder.goto(f"{elsewhere}/")
            tried = intruder.evaluate(
                "([base, token]) => tryEverything(base, token)",
                [cluster.gateway_url, cluster.token(Role.WORKER)],
            )
        finally:
            context.close()
    # The browser itself refuses: the preflight gets no Access-Control-Allow-Origin.
    assert tried["register"] == "TypeError: Failed to fetch", tried
    assert tried["healthz"] == "TypeError: Failed to fetch", tried
    assert tried["events"] == "error", tried
    assert "intruder" not in {w.name for w in cluster.client.workers().workers}


def test_docs_render_offline_with_an_authorize_button(cluster_for: Cluster, browser: Any) -> None:
    gateway = cluster_for.gateway_url
    context = browser.new_context()
    elsewhere: list[str] = []

    def offline(route: Any) -> None:
        # No internet: everything but the gateway itself fails, and is noted.
        if route.request.url.startswith(gateway):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    try:
        context.route("**/*", offline)
        docs = context.new_page()
        docs.goto(f"{gateway}/docs")
        docs.wait_for_selector(".opblock", timeout=60_000)
        operations = docs.locator(".opblock-summary-path").all_inner_texts()
        paths = {text.replace("\u200b", "").strip() for text in operations}
        assert {"/workers/register", "/tickets", "/events", "/executions/{execution_id}/events"} <= paths
        authorize = docs.locator("button.authorize")
        assert authorize.count() == 1 and "Authorize" in authorize.inner_text()
        authorize.click()
        schemes = docs.locator(".auth-container h4").all_inner_texts()
        assert {"apiToken", "workerToken", "workerSession", "streamTicket"} <= {s.split()[0] for s in schemes}

        redoc = context.new_page()
        redoc.goto(f"{gateway}/redoc")
        # ReDoc renders each operation as a heading named after its summary.
        redoc.get_by_role("heading", name="Fleet Events").wait_for(timeout=60_000)
        assert redoc.get_by_role("heading", name="Mint").count() == 1
        assert elsewhere == [], f"the doc pages reached outside the gateway: {elsewhere}"
    finally:
        context.close()
