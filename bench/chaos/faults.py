"""The fault scheduler: a seeded choice of fault every few seconds, each undone on its own clock.

Kinds (``SQLITE_KINDS`` / ``POSTGRES_KINDS``):

- ``worker_kill``: SIGKILL a worker, start it again (same name) after 1-3 s;
- ``worker_stop``: SIGSTOP a worker for 1-8 s, then SIGCONT;
- ``server_kill``: SIGKILL the server and restart it on its ports (SQLite);
- ``replica_kill``: the same for one replica of three (PostgreSQL);
- ``postgres_restart``: stop PostgreSQL for 1-3 s, then start it again;
- ``proxy_cut`` / ``proxy_stall`` / ``proxy_delay`` / ``proxy_half_open``: on one fault proxy.

Kinds come in rounds, each a seeded shuffle of every kind, so a short run
injects each kind once before any twice. A fault whose every target is busy
(all but two workers already down, the server already down) goes to the back
of its round. Undo steps (restart, SIGCONT, resume) sit in a heap and run when
due (a server's restart in a thread of its own), so faults overlap as they
would in life. Every step goes in the trail:
time since the run began, kind, target, parameters.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from bench.chaos.proxy import FaultProxy

WORKER_KINDS = ("worker_kill", "worker_stop")
PROXY_KINDS = ("proxy_cut", "proxy_stall", "proxy_delay", "proxy_half_open")
SQLITE_KINDS = (*WORKER_KINDS, "server_kill", *PROXY_KINDS)
POSTGRES_KINDS = (*WORKER_KINDS, "replica_kill", "postgres_restart", *PROXY_KINDS)
# Workers left untouched by worker faults, so work keeps flowing while others are down.
KEEP_HEALTHY = 2
FINISH_ORDER = {"postgres_resume": 0, "server_restart": 1}
# Undo steps that take seconds (a server's start on a busy box): each runs in its own thread, so
# the faults go on meanwhile; the target stays down, untouched by new faults, until it is back.
SLOW_UNDO = frozenset({"server_restart", "postgres_resume"})


@dataclass(frozen=True)
class Step:
    """One line of the trail: a fault (``fault`` true) or the step that undoes one."""

    at: float  # seconds since the run began (monotonic)
    kind: str
    target: str
    params: dict[str, float] = field(default_factory=dict)
    fault: bool = True

    def to_json(self) -> dict[str, object]:
        return {"t": round(self.at, 3), "kind": self.kind, "target": self.target, "params": self.params,
                **({} if self.fault else {"undo": True})}  # fmt: skip


class Targets(Protocol):
    """What faults act on; the run's cluster implements it over real processes."""

    workers: list[str]
    servers: int  # 1 (SQLite) or the replica count (PostgreSQL)
    proxies: dict[str, FaultProxy]

    def kill_worker(self, name: str) -> None: ...
    def start_worker(self, name: str) -> None: ...
    def stop_worker(self, name: str) -> None: ...
    def continue_worker(self, name: str) -> None: ...
    def kill_server(self, index: int) -> None: ...
    def restart_server(self, index: int) -> None: ...
    def pause_store(self) -> None: ...
    def resume_store(self) -> None: ...


class Scheduler:
    """Injects faults from ``random.Random(seed)`` until ``stop``; ``finish`` undoes whatever is pending."""

    def __init__(
        self,
        seed: int,
        targets: Targets,
        kinds: tuple[str, ...],
        on_fault: Callable[[Step], None] = lambda step: None,
        gap_s: tuple[float, float] = (2.0, 6.0),
        clock: Callable[[], float] = time.monotonic,
    ):
        self.rng = random.Random(seed)
        self.targets = targets
        self.kinds = kinds
        self.on_fault = on_fault
        self.gap_s = gap_s
        self.clock = clock
        self.began = clock()
        self.trail: list[Step] = []
        self.errors: list[str] = []  # undo steps that failed for good (reported, never hidden)
        self._round: list[str] = []
        self._pending: list[tuple[float, int, str, str, Callable[[], None]]] = []
        self._order = itertools.count()
        self._down: set[str] = set()  # workers killed or stopped, servers ("server-0") killed, "postgres"
        self._stopping = threading.Event()
        self._slow: list[threading.Thread] = []
        self._lock = threading.Lock()  # the trail and the heap: the scheduler's thread and finish()

    # ------------------------------------------------------------- driving

    def run(self, seconds: float) -> None:
        """Inject faults for ``seconds`` (blocking; the run calls it in a thread)."""
        end = self.began + seconds
        next_fault = self.clock() + self.rng.uniform(*self.gap_s)
        while not self._stopping.is_set():
            now = self.clock()
            self._run_due(now)
            if now >= end:
                break
            if now >= next_fault:
                self._inject()
                next_fault = self.clock() + self.rng.uniform(*self.gap_s)
            with self._lock:
                due = self._pending[0][0] if self._pending else next_fault
            self._stopping.wait(max(0.01, min(due, next_fault, end) - self.clock()))

    def stop(self) -> None:
        self._stopping.set()

    def finish(self) -> None:
        """Undo every pending fault now and end every proxy fault (before the drain)."""
        self._stopping.set()
        for thread in self._slow:
            thread.join(timeout=60)
        with self._lock:
            pending, self._pending = self._pending, []
        # The database first: a replica cannot start while PostgreSQL is stopped.
        pending.sort(key=lambda item: (FINISH_ORDER.get(item[2], len(FINISH_ORDER)), item[0], item[1]))
        for _, _, kind, target, action in pending:
            self._undo(kind, target, action, retry=False)
        for proxy in self.targets.proxies.values():
            proxy.restore()

    # ------------------------------------------------------------- faults

    def _next_kind(self) -> str | None:
        if not self._round:
            self._round = list(self.kinds)
            self.rng.shuffle(self._round)
        for index, kind in enumerate(self._round):
            if self._possible(kind):
                return self._round.pop(index)
        return None

    def _possible(self, kind: str) -> bool:
        if kind in WORKER_KINDS:
            return len(self._healthy_workers()) > KEEP_HEALTHY
        if kind in ("server_kill", "replica_kill"):
            return bool(self._healthy_servers()) and (
                kind == "server_kill" or len(self._healthy_servers()) > 1
            )
        if kind == "postgres_restart":
            return "postgres" not in self._down
        return bool(self.targets.proxies)

    def _healthy_workers(self) -> list[str]:
        return [name for name in self.targets.workers if name not in self._down]

    def _healthy_servers(self) -> list[int]:
        return [i for i in range(self.targets.servers) if f"server-{i}" not in self._down]

    def _inject(self) -> None:
        kind = self._next_kind()
        if kind is None:
            return
        rng, targets, now = self.rng, self.targets, self.clock()
        if kind == "worker_kill":
            name = rng.choice(self._healthy_workers())
            down = round(rng.uniform(1, 3), 2)
            step = self._record(kind, name, {"down_s": down})
            self._down.add(name)
            targets.kill_worker(name)
            self._later(now + down, "worker_start", name, lambda: self._back(name, targets.start_worker))
        elif kind == "worker_stop":
            name = rng.choice(self._healthy_workers())
            stopped = round(rng.uniform(1, 8), 2)
            step = self._record(kind, name, {"stopped_s": stopped})
            self._down.add(name)
            targets.stop_worker(name)
            self._later(
                now + stopped, "worker_continue", name, lambda: self._back(name, targets.continue_worker)
            )
        elif kind in ("server_kill", "replica_kill"):
            index = rng.choice(self._healthy_servers())
            down = round(rng.uniform(0.5, 2), 2)
            step = self._record(kind, f"server-{index}", {"down_s": down})
            self._down.add(f"server-{index}")
            targets.kill_server(index)
            self._later(now + down, "server_restart", f"server-{index}",
                        lambda: self._back(f"server-{index}", lambda _: targets.restart_server(index)))  # fmt: skip
        elif kind == "postgres_restart":
            down = round(rng.uniform(1, 3), 2)
            step = self._record(kind, "postgres", {"down_s": down})
            self._down.add("postgres")
            targets.pause_store()
            self._later(now + down, "postgres_resume", "postgres",
                        lambda: self._back("postgres", lambda _: targets.resume_store()))  # fmt: skip
        else:
            name = rng.choice(sorted(targets.proxies))
            proxy = targets.proxies[name]
            if kind == "proxy_cut":
                step = self._record(kind, name, {})
                proxy.cut()
            elif kind == "proxy_stall":
                seconds = round(rng.uniform(1, 5), 2)
                step = self._record(kind, name, {"seconds": seconds})
                proxy.stall(seconds)
            elif kind == "proxy_delay":
                ms, seconds = round(rng.uniform(20, 300)), round(rng.uniform(2, 8), 2)
                step = self._record(kind, name, {"ms": ms, "seconds": seconds})
                proxy.delay(ms, seconds)
            else:
                seconds = round(rng.uniform(2, 8), 2)
                step = self._record(kind, name, {"seconds": seconds})
                proxy.half_open(seconds)
        self.on_fault(step)

    def _back(self, name: str, action: Callable[[str], None]) -> None:
        action(name)
        self._down.discard(name)

    # ------------------------------------------------------------- the trail and the heap

    def _record(self, kind: str, target: str, params: dict[str, float], fault: bool = True) -> Step:
        step = Step(self.clock() - self.began, kind, target, params, fault)
        with self._lock:
            self.trail.append(step)
        return step

    def _later(self, due: float, kind: str, target: str, action: Callable[[], None]) -> None:
        with self._lock:
            heapq.heappush(self._pending, (due, next(self._order), kind, target, action))

    def _run_due(self, now: float) -> None:
        while True:
            with self._lock:
                if not self._pending or self._pending[0][0] > now:
                    return
                _, _, kind, target, action = heapq.heappop(self._pending)
            if kind in SLOW_UNDO:
                thread = threading.Thread(target=self._undo, args=(kind, target, action, True), daemon=True)
                self._slow.append(thread)
                thread.start()
            else:
                self._undo(kind, target, action, retry=True)

    def _undo(self, kind: str, target: str, action: Callable[[], None], retry: bool) -> None:
        # A restart can fail while something else is down (a replica while PostgreSQL is
        # stopped): try again a second later, and at finish() until it works or 30 s pass.
        deadline = self.clock() + 30
        while True:
            try:
                action()
                self._record(kind, target, {}, fault=False)
                return
            except Exception as exc:  # noqa: BLE001 - any failure to undo is retried, then reported
                if retry:
                    self._record(f"{kind}_failed", target, {}, fault=False)
                    self._later(self.clock() + 1.0, kind, target, action)
                    return
                if self.clock() > deadline:
                    self.errors.append(f"{kind} {target}: {exc}")
                    return
                time.sleep(1.0)

    def counts(self) -> dict[str, int]:
        """Faults injected, by kind (every kind of this store listed, zero included)."""
        counted = dict.fromkeys(self.kinds, 0)
        for step in self.trail:
            if step.fault:
                counted[step.kind] = counted.get(step.kind, 0) + 1
        return counted
