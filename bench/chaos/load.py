"""Open-loop load for a chaos run: submissions arrive on a seeded Poisson clock, whatever the servers do.

Each arrival is one of ``SHAPES``: a quick echo, a short sleep on one or two
cores, a body that fails, a long sleep cancelled after a random delay, a body that
sleeps past its timeout, a shape no worker can ever take, keyed work (two of a key at
once), rated work (2 a second, arriving in bursts of 8) and small batches (6 members, 2 at once). With ``tenants`` (name -> that tenant's clients)
each arrival is submitted, and later cancelled, as one of them, drawn evenly;
without, as the run's own (admin) clients. Submissions run in a bounded pool; an arrival
that finds the pool full is shed (counted, never owed). A submission that
meets a server going away is retried with backoff on the next server; an id
counts as accepted only when RunWorkflow answered it.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.chaos.flow_invariants import BATCH_MAX
from bench.chaos.invariants import NEVER_FITS, TIMES_OUT
from flux.client import FluxClient
from flux.errors import FailedPrecondition, FluxError, Unavailable
from flux.v1 import control_pb2

DEPENDENT = "dependent"

IN_FLIGHT = 32  # submissions waiting on a server at once, at most
SUBMIT_GIVE_UP_S = 60.0  # a submission still refused after this is dropped (not accepted, so not owed)


@dataclass(frozen=True)
class Shape:
    name: str
    workflow: str
    weight: float
    seconds: tuple[float, float] = (0.0, 0.0)  # sleep, drawn uniformly
    cancel_after: tuple[float, float] | None = None  # cancel this long after acceptance
    keys: tuple[str, ...] = ()  # a flow key for the input's "key", drawn evenly
    count: int = 1  # submitted at once, one after another (a burst)
    batch: int = 0  # submitted as one batch of this many members (client.map, max_concurrent BATCH_MAX)


SHAPES = (
    Shape("echo", "chaos_echo", 0.32),
    Shape("sleep", "chaos_sleep", 0.25, (0.1, 2.0)),
    Shape("sleep_wide", "chaos_sleep_wide", 0.10, (0.1, 2.0)),
    Shape("fail", "chaos_fail", 0.10),
    Shape("cancelled", "chaos_sleep", 0.17, (5.0, 20.0), (0.2, 5.0)),
    Shape(NEVER_FITS, "chaos_never_fits", 0.03),
    Shape(TIMES_OUT, "chaos_overrun", 0.03),
    Shape("keyed", "chaos_keyed", 0.08, (0.2, 1.5), keys=("k1", "k2", "k3")),
    Shape("paced", "chaos_paced", 0.03, count=8),
    # After an execution of an earlier arrival (echo, sleep, fail or cancelled): it must not start
    # before that one completed, and ends CANCELLED (reason dependency) when it did not.
    Shape(DEPENDENT, "chaos_after", 0.06),
    Shape("batched", "chaos_sleep", 0.03, (0.2, 1.0), batch=6),
)
# The shapes a dependent may wait for: each ends on its own (never_fits would hold it forever).
DEPENDABLE = frozenset({"echo", "sleep", "fail", "cancelled"})


class Load:
    """``start()`` submits at ``rate`` per second until ``stop()``; ``accepted`` maps id -> shape name."""

    def __init__(
        self, seed: int, clients: Sequence[FluxClient], markers: str, rate: float = 8.0,
        clock: Callable[[], float] = time.monotonic, tenants: Mapping[str, Sequence[FluxClient]] | None = None,
    ):  # fmt: skip
        self.rng = random.Random(seed)
        self.clients = list(clients)
        self.tenants = {name: list(c) for name, c in sorted((tenants or {}).items())}
        self.owner: dict[str, str] = {}  # id -> the tenant that submitted it (absent: the run's clients)
        self.markers = markers
        self.rate = rate
        self.clock = clock
        self.accepted: dict[str, str] = {}
        self.after: dict[str, tuple[str, ...]] = {}  # a dependent's id -> what it waits for
        self._dependable: list[str] = []  # recent accepted ids a dependent may wait for
        self.cancelled: set[str] = set()  # Cancel answered CANCELLED
        self.stats: Counter[str] = Counter()  # submitted, retries, shed, given_up, errors, cancels...
        self.errors: list[str] = []  # answers that are neither acceptance nor a retryable refusal
        self._lock = threading.RLock()  # _count is also called with it held
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="chaos-submit")
        self._in_flight = 0
        self._cancels: list[tuple[float, str]] = []
        self._threads = [
            threading.Thread(target=self._arrivals, name="chaos-load", daemon=True),
            threading.Thread(target=self._canceller, name="chaos-cancel", daemon=True),
        ]
        self._turn = 0

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """No new arrivals; submissions under way finish (accepted or given up) before this returns."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------- submitting

    def submit(
        self,
        workflow: str,
        value: object,
        shape: str,
        give_up_s: float = SUBMIT_GIVE_UP_S,
        tenant: str = "",
        after: tuple[str, ...] = (),
    ) -> str | None:
        """Submit until a server accepts (returns the id) or ``give_up_s`` pass (None); as ``tenant``
        when given, else with the run's own clients."""
        deadline = self.clock() + give_up_s
        backoff = 0.1
        clients = self.tenants[tenant] if tenant else self.clients
        while True:
            with self._lock:
                client = clients[self._turn % len(clients)]
                self._turn += 1
            try:
                execution_id = client.run(workflow, value, after=after or None).execution_id
            except Unavailable:
                self._count("retries")
            except FluxError as exc:  # refused for a reason a retry will not change: a harness bug
                self._count("errors")
                self.errors.append(f"{workflow}: {type(exc).__name__}: {exc}")
                return None
            else:
                with self._lock:
                    self.accepted[execution_id] = shape
                    if tenant:
                        self.owner[execution_id] = tenant
                    if after:
                        self.after[execution_id] = after
                    if shape in DEPENDABLE:
                        self._dependable = [*self._dependable[-63:], execution_id]
                return execution_id
            if self.clock() + backoff > deadline:
                self._count("given_up")
                return None
            time.sleep(backoff)
            backoff = min(2.0, backoff * 2)

    def _arrivals(self) -> None:
        weights = [shape.weight for shape in SHAPES]
        next_at = self.clock()
        while not self._stopping.is_set():
            next_at += self.rng.expovariate(self.rate)
            self._stopping.wait(max(0.0, next_at - self.clock()))
            if self._stopping.is_set():
                return
            shape = self.rng.choices(SHAPES, weights)[0]
            value: dict[str, object] = {"markers": self.markers}
            if shape.seconds[1]:
                value["seconds"] = round(self.rng.uniform(*shape.seconds), 3)
            if shape.keys:
                value["key"] = self.rng.choice(shape.keys)
            cancel_after = self.rng.uniform(*shape.cancel_after) if shape.cancel_after else None
            tenant = self.rng.choice(list(self.tenants)) if self.tenants else ""
            with self._lock:
                if self._in_flight >= IN_FLIGHT:
                    self._count("shed")
                    continue
                self._in_flight += 1
            self._count("submitted")
            self._pool.submit(self._one, shape, value, cancel_after, tenant)

    def submit_batch(self, shape: Shape, value: object, tenant: str = "") -> None:
        """Map ``shape.batch`` runs of ``value`` as one batch of at most BATCH_MAX at once, until a
        server accepts (every member counts as accepted) or the submission gives up."""
        deadline, backoff = self.clock() + SUBMIT_GIVE_UP_S, 0.1
        clients = self.tenants[tenant] if tenant else self.clients
        while True:
            with self._lock:
                client = clients[self._turn % len(clients)]
                self._turn += 1
            try:
                runs = client.map(shape.workflow, [value] * shape.batch, max_concurrent=BATCH_MAX)
            except Unavailable:
                self._count("retries")
            except FluxError as exc:
                self._count("errors")
                self.errors.append(f"{shape.workflow} batch: {type(exc).__name__}: {exc}")
                return
            else:
                with self._lock:
                    for run in runs:
                        self.accepted[run.execution_id] = shape.name
                        if tenant:
                            self.owner[run.execution_id] = tenant
                return
            if self.clock() + backoff > deadline:
                self._count("given_up")
                return
            time.sleep(backoff)
            backoff = min(2.0, backoff * 2)

    def _one(self, shape: Shape, value: dict[str, object], cancel_after: float | None, tenant: str) -> None:
        try:
            if shape.batch:
                self.submit_batch(shape, value, tenant)
                return
            after: tuple[str, ...] = ()
            if shape.name == DEPENDENT:
                with self._lock:
                    if not self._dependable:
                        return
                    dependency = self.rng.choice(self._dependable)
                # Its dependency's tenant: a dependency another tenant cannot see is refused.
                after, tenant = (dependency,), self.owner.get(dependency, "")
            for _ in range(shape.count - 1):
                self.submit(shape.workflow, value, shape.name, tenant=tenant)
            execution_id = self.submit(shape.workflow, value, shape.name, tenant=tenant, after=after)
            if execution_id is not None and cancel_after is not None:
                with self._lock:
                    heapq.heappush(self._cancels, (self.clock() + cancel_after, execution_id))
        finally:
            with self._lock:
                self._in_flight -= 1

    # ------------------------------------------------------------- cancelling

    def _canceller(self) -> None:
        # Runs past stop() until every scheduled cancel is sent, so each cancelled id is decided.
        while True:
            with self._lock:
                due = self._cancels[0][0] if self._cancels else None
                if due is not None and due <= self.clock():
                    _, execution_id = heapq.heappop(self._cancels)
                else:
                    execution_id = None
            if execution_id is not None:
                self._cancel(execution_id)
                continue
            if due is None and self._stopping.is_set() and self._in_flight == 0:
                return
            time.sleep(0.05)

    def _cancel(self, execution_id: str) -> None:
        tenant = self.owner.get(execution_id)
        clients = self.tenants[tenant] if tenant else self.clients
        for attempt in range(20):
            client = clients[attempt % len(clients)]
            try:
                answer = client.cancel(execution_id)
            except Unavailable:
                self._count("cancel_retries")
                time.sleep(min(2.0, 0.1 * 2**attempt))
                continue
            except FailedPrecondition:
                self._count("cancel_too_late")  # it finished first: nothing to check
                return
            except FluxError as exc:
                self._count("errors")
                self.errors.append(f"cancel {execution_id}: {type(exc).__name__}: {exc}")
                return
            if answer.state == control_pb2.EXECUTION_STATE_CANCELLED:
                with self._lock:
                    self.cancelled.add(execution_id)
                self._count("cancelled")
            return
        self._count("cancel_given_up")
