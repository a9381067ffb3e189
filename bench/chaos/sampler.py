"""Every half second: what each server believes each worker holds, and what each worker really runs;
the cores each tenant holds, as the run's ``tenants`` callable reads them; and the rows each flow key
holds, as its ``keys`` callable reads them.

The server side is ``ListWorkers`` on every server that answers (reserved cores
against advertised, active executions against capacity). The worker side is
the marker files the chaos workflows keep while their bodies run
(bench/chaos/workflows.py): a marker counts while the pid in it is alive and
was started before the marker was written (a killed worker's markers stay
behind; its pid is dead, or reused by a younger process).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from bench.chaos.flow_invariants import KeySample
from bench.chaos.invariants import Sample, TenantSample
from flux.client import FluxClient
from flux.errors import FluxError

INTERVAL_S = 0.5


def running(markers: Path) -> dict[str, list[int]]:
    """Worker name -> requested cores of each body its live process runs now."""
    return {worker: [cpu for _, cpu in found] for worker, found in bodies(markers).items()}


def bodies(markers: Path) -> dict[str, list[tuple[str, int]]]:
    """Worker name -> (execution id, requested cores) of each body its live process runs now."""
    found: dict[str, list[tuple[str, int]]] = {}
    if not markers.is_dir():
        return found
    for folder in markers.iterdir():
        live: list[tuple[str, int]] = []
        for marker in folder.iterdir() if folder.is_dir() else ():
            with contextlib.suppress(OSError, ValueError, psutil.Error):
                written = marker.stat().st_mtime
                pid, cpu = (int(part) for part in marker.read_text().split())
                process = psutil.Process(pid)
                if process.status() != psutil.STATUS_ZOMBIE and process.create_time() <= written + 1:
                    live.append((marker.name, cpu))
        found[folder.name] = live
    return found


class Sampler:
    """Samples until ``stop``; keeps every sample that breaks a limit, and counts the rest."""

    def __init__(
        self, clients: Sequence[FluxClient], markers: Path, cpus: int, capacity: int,
        began: float, clock: Callable[[], float] = time.monotonic,
        tenants: Callable[[], tuple[str, dict[str, int]] | None] | None = None,
        keys: Callable[[], tuple[str, dict[tuple[str, str], int]]] | None = None,
        batches: Callable[[], tuple[str, dict[tuple[str, str], int]]] | None = None,
    ):  # fmt: skip
        self.clients, self.markers = list(clients), markers
        # (source, cores per tenant) now, or None while nothing can answer; every answer is kept.
        self.tenants = tenants
        self.tenant_samples: list[TenantSample] = []
        self.tenant_peak: dict[str, int] = {}
        # (source, rows held per (tenant, flow key)) of the keyed workflow now; every answer is kept.
        self.keys = keys
        self.key_samples: list[KeySample] = []
        self.key_peak = 0
        # (source, members held per (tenant, batch id)) of every batch now; every answer is kept.
        self.batches = batches
        self.batch_samples: list[KeySample] = []
        self.batch_peak = 0
        self.cpus, self.capacity = cpus, capacity
        self.began, self.clock = began, clock
        self.kept: list[Sample] = []
        self.taken = 0
        # The most cores and executions seen on one worker, per side: shows the samples saw real load.
        self.peak = {"server_cpu": 0, "server_executions": 0, "markers_cpu": 0, "markers_executions": 0}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stopping.wait(INTERVAL_S):
            self.sample_once()

    def sample_once(self) -> None:
        at = self.clock() - self.began
        samples: list[Sample] = []
        for client in self.clients:
            try:
                listing = client.workers().workers
            except FluxError:
                continue  # that server is down just now
            samples += [
                Sample(
                    at,
                    w.name,
                    f"server {client.address}",
                    w.reserved.cpu,
                    w.resources.cpu_total,
                    w.active_executions,
                    w.capacity,
                )  # fmt: skip
                for w in listing
                if w.resources.cpu_total
            ]
        samples += [
            Sample(at, worker, "markers", sum(cpu for _, cpu in live), self.cpus, len(live), self.capacity,
                   tuple(sorted(execution_id for execution_id, _ in live)))
            for worker, live in bodies(self.markers).items()
        ]  # fmt: skip
        self.taken += len(samples)
        for sample in samples:
            side = "markers" if sample.source == "markers" else "server"
            self.peak[f"{side}_cpu"] = max(self.peak[f"{side}_cpu"], sample.cpu)
            self.peak[f"{side}_executions"] = max(self.peak[f"{side}_executions"], sample.count)
        self.kept += [s for s in samples if s.cpu > s.cpu_limit or s.count > s.capacity]
        if self.keys is not None:
            with contextlib.suppress(Exception):  # the store down or busy just now
                source, held = self.keys()
                self.key_samples.append(KeySample(at, source, held))
                self.key_peak = max([self.key_peak, *held.values()])
        if self.batches is not None:
            with contextlib.suppress(Exception):  # the store down or busy just now
                source, held = self.batches()
                self.batch_samples.append(KeySample(at, source, held))
                self.batch_peak = max([self.batch_peak, *held.values()])
        if self.tenants is not None:
            with contextlib.suppress(Exception):  # a server or the database down just now
                found = self.tenants()
                if found is not None:
                    source, cpu = found
                    self.tenant_samples.append(TenantSample(at, source, cpu))
                    for tenant, cores in cpu.items():
                        self.tenant_peak[tenant] = max(self.tenant_peak.get(tenant, 0), cores)
