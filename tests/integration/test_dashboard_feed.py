"""The dashboard's live-feed adapter (gateway/browser/ui/js/stream.js, live.js) in a real chromium.

No server: the page's files are served from the package by Playwright's router
on a made-up origin, and ``fetch``/``EventSource`` are replaced inside the page,
so each way into the fleet feed (header stream, ticket + EventSource, none)
is driven exactly, with no timing in the assertions.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

UI = Path(__file__).parents[2] / "gateway" / "browser" / "ui"
ORIGIN = "http://flux.test"

# A stand-in for fetch: answers any .../events feed per `mode` and /tickets with a ticket, records
# those calls, and passes the rest to the real fetch (the test's router); `push(text)` writes to
# the feed opened last.
FAKES = """
window.__calls = [];
const realFetch = window.fetch;
window.__fake = (mode) => {
  window.fetch = async (url, init = {}) => {
    const path = new URL(String(url)).pathname;
    if (!path.endsWith('/events') && path !== '/tickets') return realFetch(url, init);
    window.__calls.push({ path, url: String(url), method: init.method || 'GET',
      auth: (init.headers || {}).Authorization || '', body: init.body || '' });
    if (path.endsWith('/events') && mode === 'stream') {
      const body = new ReadableStream({ start(c) { window.__push = (t) => c.enqueue(new TextEncoder().encode(t)); } });
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
    }
    if (path === '/tickets' && mode === 'refused') return Response.json({ ticket: 't-1' });
    return new Response('{}', { status: mode === 'refused' && path !== '/tickets' ? 401 : 404 });
  };
  window.EventSource = class {
    constructor(url) { window.__source = this; this.url = String(url); this.listeners = {}; }
    addEventListener(name, fn) { this.listeners[name] = fn; }
    close() { this.closed = true; }
  };
};
"""


@pytest.fixture
def answers() -> dict[str, object]:
    """JSON answers of the faked API, by path; a test fills it before it opens a view."""
    return {}


@pytest.fixture
def page(browser, answers: dict[str, object]) -> Iterator[object]:  # noqa: F811
    context = browser.new_context()

    def serve(route) -> None:  # type: ignore[no-untyped-def]
        path = route.request.url.removeprefix(f"{ORIGIN}/ui/").split("#")[0] or "index.html"
        file = UI / path
        api = "/" + route.request.url.removeprefix(f"{ORIGIN}/").split("?")[0]
        if route.request.url.startswith(f"{ORIGIN}/ui/") and file.is_file():
            route.fulfill(
                body=file.read_bytes(), content_type=mimetypes.guess_type(file.name)[0] or "text/plain"
            )
        elif api in answers:
            route.fulfill(body=json.dumps(answers[api]), content_type="application/json")
        else:
            route.fulfill(status=404, body="{}", content_type="application/json")

    context.route(f"{ORIGIN}/**", serve)
    context.add_init_script("sessionStorage.setItem('flux.dashboard.token', 'tok-123');")
    context.add_init_script(FAKES)
    page = context.new_page()
    page.goto(f"{ORIGIN}/ui/")
    yield page
    context.close()


OPEN = """async (mode) => {
  window.__fake(mode);
  window.__calls = [];
  const { openFleetStream } = await import('./js/stream.js');
  const events = [], states = [];
  window.__stream = openFleetStream({ onEvent: (n, d) => events.push([n, d]), onState: (s) => states.push(s) });
  window.__seen = { events, states };
}"""


def _until(page, expression: str) -> object:  # type: ignore[no-untyped-def]
    return page.wait_for_function(expression, timeout=10_000).json_value()


def test_the_feed_is_read_with_the_token_in_a_header_and_every_event_counts(page) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(OPEN, "stream")
    _until(page, "window.__seen.states.includes('live') && !!window.__push")
    page.evaluate(
        "window.__push('event: ping\\ndata: {}\\n\\n: keep-alive\\n\\nevent: worker_pa');"
        'window.__push(\'used\\ndata: {"name": "w1"}\\n\\ndata: line 1\\ndata: line 2\\n\\n\')'
    )
    events = _until(page, "window.__seen.events.length >= 2 && window.__seen.events")
    assert events == [["worker_paused", '{"name": "w1"}'], ["message", "line 1\nline 2"]]
    calls = page.evaluate("window.__calls")
    assert [(c["path"], c["auth"]) for c in calls] == [("/events", "Bearer tok-123")]
    assert "tok-123" not in calls[0]["url"]
    page.evaluate("window.__stream.close()")


def test_a_refused_header_falls_back_to_a_ticket_and_eventsource(page) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(OPEN, "refused")
    url = _until(page, "window.__source && window.__source.url")
    assert url == f"{ORIGIN}/events?ticket=t-1"
    calls = page.evaluate("window.__calls")
    ticket = next(c for c in calls if c["path"] == "/tickets")
    assert ticket["method"] == "POST" and ticket["auth"] == "Bearer tok-123"
    assert json.loads(ticket["body"]) == {"scope": "fleet"}
    assert "tok-123" not in url
    # Any named event, or an unnamed one, reaches the page.
    page.evaluate(
        "window.__source.listeners['execution_finished']({data: '{}'});window.__source.onmessage({data: 'x'})"
    )
    assert page.evaluate("window.__seen.events") == [["execution_finished", "{}"], ["message", "x"]]
    page.evaluate("window.__stream.close()")


def test_no_feed_on_the_gateway_means_polling(page) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(OPEN, "absent")
    assert _until(page, "window.__seen.states.includes('unavailable') && window.__seen.states") == [
        "connecting",
        "unavailable",
    ]
    page.evaluate("window.__stream.close()")


BURST = """async () => {
  window.__fake('stream');
  const { Live, Resource } = await import('./js/live.js');
  window.__loads = 0;
  const live = new Live({ onFeed: () => {} });
  live.add(new Resource('status', async () => { window.__loads += 1; return {}; }));
  live.active = new Set(['status']);
  live.start();
  window.__live = live;
}"""


def test_a_burst_of_events_is_one_re_read(page) -> None:  # type: ignore[no-untyped-def]
    page.evaluate(BURST)
    _until(page, "!!window.__push")
    # The feed going live is itself a re-read: wait for it, so that the burst's read is counted
    # alone (pushed within the 150 ms debounce, the two were one read; on a loaded host, two).
    _until(page, "window.__loads === 1")
    page.evaluate("window.__push('event: worker_reported\\ndata: {}\\n\\n'.repeat(200))")
    _until(page, "window.__loads >= 2")
    # Give a third read every chance to happen: the 200 events arrived as one chunk, so none may.
    page.wait_for_timeout(500)
    assert page.evaluate("window.__loads") == 2
    page.evaluate("window.__live.stop()")


def _worker(i: int) -> dict[str, object]:
    return {
        "name": f"w-{i:04d}", "labels": {"zone": f"zone-{i % 4}"}, "connected": True, "paused": i % 10 == 0,
        "transport": "grpc", "capacity": 16, "active_executions": 1, "runtimes": ["python 3.11"],
        "resources": {"cpu_total": 8, "cpu_available": 6, "memory_total": str(16 << 30),
                      "memory_available": str(8 << 30), "disk_total": "0", "disk_free": "0", "gpus": []},
        "reserved": {"cpu": i % 8, "memory": "0", "disk": "0", "gpu_indices": []},
        "free": {"cpu": str(max(0, 6 - i % 8)), "memory": str(8 << 30), "disk": "0", "gpus": "0"},
        "last_seen_ms": "0",
    }  # fmt: skip


def test_a_thousand_workers_are_shown_a_page_at_a_time(page, answers) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    answers["/workers"] = {"workers": [_worker(i) for i in range(1000)]}
    page.goto(f"{ORIGIN}/ui/#/fleet")
    count = page.locator("#fleet-count")
    expect(count).to_have_text("1–50 of 1000 workers")
    expect(page.locator("#fleet tbody tr")).to_have_count(50)
    expect(page.locator("#summary")).to_have_text(
        "1000/1000 workers connected (100 paused) · 1000/16000 slots busy"
    )
    page.get_by_role("button", name="Next").click()
    expect(count).to_have_text("51–100 of 1000 workers")
    expect(page.locator("#fleet tbody tr").first).to_have_attribute("data-worker", "w-0050")
    # Filtering narrows the whole fleet, not the page, and starts again at its first page.
    page.get_by_label("Filter").fill("zone=zone-2")
    expect(count).to_have_text("1–50 of 250 workers (1000 known)")
    page.get_by_label("State").select_option("paused")
    expect(count).to_have_text("1–50 of 50 workers (1000 known)")
    states = page.locator("#fleet tbody tr").evaluate_all("rows => rows.map((r) => r.dataset.state)")
    assert set(states) == {"paused"}
    # A worker's bar carries what it advertised, what is free to the matcher and what is reserved.
    cpu = page.locator('tr[data-worker="w-0030"] [data-resource="cpu"]')
    expect(cpu).to_have_attribute("data-total", "8")
    expect(cpu).to_have_attribute("data-free", "0")
    expect(cpu).to_have_attribute("data-reserved", "6")


def _execution(state: str, updated: int) -> dict[str, object]:
    return {
        "execution_id": "e-1", "workflow": {"name": "train", "version": 2}, "state": f"EXECUTION_STATE_{state}",
        "worker": "gpu-1", "attempt": 1, "generation": "3", "input_json": "{}", "output_json": "",
        "gpu_indices": [0], "created_at_ms": "1000", "updated_at_ms": str(updated),
    }  # fmt: skip


def test_an_execution_page_times_each_step_from_its_feed(page, answers) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    answers["/executions/e-1"] = _execution("CREATED", 1000)
    answers["/executions/e-1/explain"] = {
        "execution_id": "e-1",
        "summary": "0/1 workers can run it",
        "workers": [],
    }
    page.evaluate("window.__fake('stream')")
    page.goto(f"{ORIGIN}/ui/#/executions/e-1")
    expect(page.locator("#detail-state")).to_have_text("created")
    _until(page, "window.__calls.some((c) => c.path === '/executions/e-1/events') && !!window.__push")
    assert (
        page.evaluate("window.__calls.find((c) => c.path === '/executions/e-1/events').auth")
        == "Bearer tok-123"
    )
    # Each event carries the execution as WatchExecution sends it: its step gets that time.
    answers["/executions/e-1"] = _execution("RUNNING", 2500)
    scheduled, running = json.dumps(_execution("SCHEDULED", 2000)), json.dumps(_execution("RUNNING", 2500))
    page.evaluate(f"window.__push('event: execution\\ndata: ' + {json.dumps(scheduled)} + '\\n\\n')")
    page.evaluate(f"window.__push('data: ' + {json.dumps(running)} + '\\n\\n')")
    expect(page.locator("#detail-state")).to_have_text("running")
    expect(page.locator('[data-step="scheduled"]')).to_have_attribute("data-at", "2000")
    expect(page.locator('[data-step="running"]')).to_have_attribute("data-at", "2500")
    expect(page.locator('[data-step="created"]')).to_have_attribute("data-at", "1000")
    expect(page.locator('[data-field="gpus"]')).to_have_text("0")
