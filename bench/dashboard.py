"""Dashboard figures (issue 15): the page at /ui with 1,000 workers and 10,000 pending.

A real server process; 1,000 simulated workers registered over the real gRPC
wire from one process (``Register`` then an open ``Connect`` stream each, with
varied resources, labels and GPUs: the core cannot tell them from worker
processes, which would not fit on this box); 10,000 executions submitted that
no worker can take (two requirement shapes), so the queue holds still. The
page runs in the system's headless chromium, signed in with the API token.

Measured, in the page's own clock where it can be:
- first render: navigation start -> the fleet's first page of rows (and the
  queue's totals) is on screen, several fresh page loads;
- reflect a change: an operator call made (pause/resume a worker on the
  visible page, the call's own time reported beside it; one more pending
  execution) -> the DOM shows it, each
  change made at a random point of the page's refresh cycle. Without a fleet
  event feed on this gateway the page polls every 2 s, so this is about half
  the interval plus one read; with ``GET /events`` it follows the events;
- responsiveness: flipping a fleet page (click -> new rows painted), and the
  longest main-thread task the browser reported (Long Tasks API) while the
  page kept refreshing the 1,000-worker fleet.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import threading
import time
from pathlib import Path

import grpc
import httpx

from bench.common import percentiles, write
from flux.security import Role
from flux.testing import CHROMIUM_ARGS, Cluster, chromium_path
from flux.v1 import control_pb2, control_pb2_grpc, resources_pb2, worker_pb2, worker_pb2_grpc

WORKFLOWS = Path(__file__).with_name("workflows.py")
WORKERS = 1000
PENDING = 10_000
LOADS = 3
CHANGES = 10
POLL_S = 2.0  # the page's poll interval without a feed (POLL_MS in gateway/browser/ui/js/live.js)
STREAMS_PER_CHANNEL = 100
TOKEN_KEY = "flux.dashboard.token"


def _resources(i: int) -> resources_pb2.WorkerResources:
    cpus = (4, 8, 16, 32, 64)[i % 5]
    gpus = [
        resources_pb2.Gpu(index=g, name="Simulated", memory_total=80 << 30, memory_free=(80 - 10 * g) << 30)
        for g in range(i % 3 if i % 10 == 0 else 0)
    ]
    return resources_pb2.WorkerResources(
        cpu_total=cpus, cpu_available=cpus - i % 3, memory_total=cpus << 31, memory_available=cpus << 30,
        disk_total=500 << 30, disk_free=(100 + i % 300) << 30, gpus=gpus,
    )  # fmt: skip


class SimulatedFleet:
    """``count`` workers on open Connect streams, and submissions, from one asyncio loop in a thread."""

    def __init__(self, cluster: Cluster, count: int):
        self.cluster, self.count = cluster, count
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.channels: list = []
        self.calls: list = []

    def start(self) -> float:
        self.thread.start()
        started = time.perf_counter()
        asyncio.run_coroutine_threadsafe(self._connect(), self.loop).result(timeout=300)
        return time.perf_counter() - started

    def submit(self, workflow: str, n: int) -> float:
        started = time.perf_counter()
        asyncio.run_coroutine_threadsafe(self._submit(workflow, n), self.loop).result(timeout=600)
        return time.perf_counter() - started

    def stop(self) -> None:
        async def close() -> None:
            for call in self.calls:
                call.cancel()
            for channel in self.channels:
                await channel.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def _connect(self) -> None:
        worker = self.cluster.credentials(Role.WORKER)
        self.metadata = worker.metadata
        self.control_metadata = self.cluster.credentials(Role.CLIENT).metadata
        for _ in range(-(-self.count // STREAMS_PER_CHANNEL)):
            self.channels.append(worker.aio_channel(self.cluster.address))
        self.control = control_pb2_grpc.ControlServiceStub(self.channels[0])
        for start in range(0, self.count, 50):
            await asyncio.gather(*(self._join(i) for i in range(start, min(start + 50, self.count))))

    async def _join(self, i: int) -> None:
        stub = worker_pb2_grpc.WorkerServiceStub(self.channels[i // STREAMS_PER_CHANNEL])
        name = f"sim-{i:04d}"
        labels = {"zone": f"zone-{i % 4}", "pool": ("cpu", "gpu")[i % 10 == 0]}
        token = (
            await stub.Register(
                worker_pb2.RegisterRequest(name=name, labels=labels, resources=_resources(i), capacity=16),
                metadata=self.metadata,
            )
        ).session_token
        call = stub.Connect(worker_pb2.ConnectRequest(name=name, session_token=token), metadata=self.metadata)
        await call.read()  # Connected
        self.calls.append(call)
        self.loop.create_task(self._drain(call))

    async def _drain(self, call) -> None:  # type: ignore[no-untyped-def]
        # Read pings and any dispatch (none is expected) so the core never sees a stalled worker.
        try:
            while await call.read() is not grpc.aio.EOF:
                pass
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass

    async def _submit(self, workflow: str, n: int) -> None:
        request = control_pb2.RunWorkflowRequest(workflow_name=workflow, input_json="null")
        for start in range(0, n, 100):
            await asyncio.gather(
                *(self.control.RunWorkflow(request, metadata=self.control_metadata)
                  for _ in range(min(100, n - start)))
            )  # fmt: skip


FLEET_READY = """() => {
  const count = document.getElementById('fleet-count');
  return count && count.textContent.includes('of %d workers')
    && document.querySelectorAll('#fleet tbody tr').length > 0 ? performance.now() : false;
}"""
QUEUE_READY = """() => {
  const total = document.querySelector('#queue-total b');
  return total && total.textContent === '%d' && document.querySelector('#queue tbody tr')
    ? performance.now() : false;
}"""
LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
  .observe({ type: 'longtask', buffered: true });
"""
# How long the page's reads took, by route, from the browser's Resource Timing entries.
READS = """(route) => performance.getEntriesByType('resource')
  .filter((e) => new URL(e.name).pathname === route).map((e) => e.duration / 1000)"""
FLIP = """async () => {
  const first = () => document.querySelector('#fleet tbody tr')?.dataset.worker;
  const before = first();
  const started = performance.now();
  document.querySelector('[data-focus="next"]').click();
  while (first() === before) await new Promise((r) => requestAnimationFrame(r));
  await new Promise((r) => requestAnimationFrame(r));
  return performance.now() - started;
}"""


def _page(browser, base: str, token: str, view: str):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.add_init_script(f"sessionStorage.setItem({json.dumps(TOKEN_KEY)}, {json.dumps(token)});")
    context.add_init_script(LONG_TASKS)
    page = context.new_page()
    page.goto(f"{base}/ui/#/{view}")
    return context, page


def _wait_ms(page, script: str) -> float:  # type: ignore[no-untyped-def]
    return float(page.wait_for_function(script, polling="raf", timeout=120_000).json_value())


def measure(cluster: Cluster, browser, pending: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    base, token = cluster.gateway_url, cluster.token(Role.CLIENT)
    fleet_ms, queue_ms = [], []
    for _ in range(LOADS):
        context, page = _page(browser, base, token, "fleet")
        fleet_ms.append(_wait_ms(page, FLEET_READY % WORKERS) / 1000)
        context.close()
        context, page = _page(browser, base, token, "queue")
        queue_ms.append(_wait_ms(page, QUEUE_READY % pending) / 1000)
        context.close()

    context, page = _page(browser, base, token, "fleet")
    _wait_ms(page, FLEET_READY % WORKERS)
    feed = page.locator("#feed").get_attribute("data-feed")
    control = control_pb2_grpc.ControlServiceStub(cluster.channel(Role.CLIENT))
    # Each change lands at a random point of the poll cycle: right after a detection would
    # always be just after a poll, the worst case, and the figure would be the interval itself.
    rng = random.Random(15)
    pause_ms, call_ms = [], []
    for i in range(CHANGES):
        page.wait_for_timeout(rng.uniform(0, POLL_S) * 1000)
        paused = i % 2 == 0
        started = time.perf_counter()
        if paused:
            control.PauseWorker(control_pb2.PauseWorkerRequest(name="sim-0000"))
        else:
            control.ResumeWorker(control_pb2.ResumeWorkerRequest(name="sim-0000"))
        call_ms.append(time.perf_counter() - started)
        state = "paused" if paused else "connected"
        page.wait_for_selector(f'tr[data-worker="sim-0000"][data-state="{state}"]', timeout=60_000)
        pause_ms.append(time.perf_counter() - started)
    flips = [float(page.evaluate(FLIP)) / 1000 for _ in range(5)]
    long_tasks = page.evaluate("window.__longTasks")
    workers_reads = page.evaluate(READS, "/workers")
    context.close()

    context, page = _page(browser, base, token, "queue")
    _wait_ms(page, QUEUE_READY % pending)
    submit_ms = []
    for i in range(CHANGES):
        page.wait_for_timeout(rng.uniform(0, POLL_S) * 1000)
        started = time.perf_counter()
        control.RunWorkflow(control_pb2.RunWorkflowRequest(workflow_name="waits_for_pool", input_json="null"))
        page.wait_for_function(QUEUE_READY % (pending + i + 1), polling="raf", timeout=60_000)
        submit_ms.append(time.perf_counter() - started)
    status_reads = page.evaluate(READS, "/status")
    context.close()

    with httpx.Client(base_url=base, trust_env=False, timeout=30) as http:
        status = http.get("/status", headers={"Authorization": f"Bearer {token}"})
        status.raise_for_status()
    return {
        "feed": feed,
        "first_render_fleet_ms": percentiles(fleet_ms),
        "first_render_queue_ms": percentiles(queue_ms),
        "reflect_pause_resume_ms": percentiles(pause_ms),
        "pause_resume_call_ms": percentiles(call_ms),
        "reflect_new_pending_ms": percentiles(submit_ms),
        "fleet_page_flip_ms": percentiles(flips),
        "long_tasks_ms": {"count": len(long_tasks), "max": round(max(long_tasks, default=0), 1)},
        "read_workers_ms": percentiles(workers_reads),
        "read_status_ms": percentiles(status_reads),
        "status_body_bytes": len(status.content),
    }


def main(workers: int = WORKERS, pending: int = PENDING) -> dict[str, object]:
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise SystemExit("python -m bench dashboard needs chromium (/usr/bin/chromium or FLUX_CHROMIUM)")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        fleet = None
        try:
            cluster.start_server("--log-level", "WARNING")
            cluster.register(WORKFLOWS)
            fleet = SimulatedFleet(cluster, workers)
            join_s = fleet.start()
            gpu_shape = pending // 10
            submit_s = fleet.submit("waits_for_pool", pending - gpu_shape) + fleet.submit(
                "waits_for_gpus", gpu_shape
            )
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
                try:
                    figures = measure(cluster, browser, pending)
                finally:
                    browser.close()
        finally:
            if fleet is not None:
                fleet.stop()
            cluster.close()
    result = {
        "workers": workers,
        "pending": pending,
        "fleet_join_s": round(join_s, 2),
        "submit_s": round(submit_s, 2),
        "poll_interval_s": POLL_S,
        **figures,
    }
    write("dashboard", result)
    return result


if __name__ == "__main__":
    main()
