"""Flow control as the matcher keeps it: budgets per (limit, key), and the work waiting on each.

A limited execution names the budgets it needs (``Gate``): a concurrency budget (at most ``max``
of one key SCHEDULED or RUNNING) and a rate budget (a token bucket, refilled continuously). It
enters the pending queue only once every budget it needs has room, and is charged then, in the
same step: so the queue never holds more of a key than the key may run, a pass can place
everything it holds without looking at keys, and a waiting execution never holds a worker's
room nor sits in front of unlimited work (it is not in the queue at all).

Waiting work is indexed by the budget it waits on, by priority, then by key: a budget that frees
takes the next key in turn (round-robin across keys, FIFO within a key), highest priority first,
so one key's 10,000 queued runs do not starve another's one. Every operation is a few dict and
deque steps, whatever the number of keys: nothing scans the keys or the backlog.

A rate budget lets at most ``burst`` of its admissions wait in the queue unplaced, and refuses
more until one is placed: tokens taken while no worker is free would otherwise pile up and start
together later, above the rate over that window.

Pure: no clock of its own (``now`` is passed in), no I/O. The dispatcher (state/flow.py) calls
``admit`` on every path into the queue, ``placed`` when a pass places, ``release`` when an
execution's worker frees it or it leaves the queue otherwise, and ``refill`` when a token is due
(``wakeups`` says when, for its timer structure).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Gate:
    """One budget an execution needs: ``budget`` names it (a limit and a key), the rest sets it."""

    budget: str
    # What explain calls it: "key customer=acme" or "rate limit openai".
    label: str
    # Concurrency: at most this many hold it at once (None: a rate budget).
    max: int | None = None
    # Rate: tokens per second, and how many may be saved up (and wait unplaced).
    rate: float = 0.0
    burst: int = 1
    # The limit it belongs to, for metrics without per-key labels.
    limit: str = ""


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a limited execution waits, for explain."""

    gate: Gate
    in_use: int
    # Rate: seconds until the next token (0 when only the unplaced cap holds it back).
    next_token_in: float = 0.0

    def describe(self) -> str:
        """``key customer=acme at 5/5 running`` / ``rate limit openai: next token in 0.4 s``."""
        if self.gate.max is not None:
            return f"{self.gate.label} at {self.in_use}/{self.gate.max} running"
        if self.next_token_in > 0:
            return f"{self.gate.label}: next token in {self.next_token_in:.1f} s"
        return f"{self.gate.label}: {self.in_use} admitted, waiting for a worker"


class _Budget:
    __slots__ = ("gate", "in_use", "tokens", "stamp", "waiting", "priorities", "count")

    def __init__(self, gate: Gate, now: float):
        self.gate = gate
        self.in_use = 0
        self.tokens = float(gate.burst)
        self.stamp = now
        # priority -> key -> ids, keys in turn order; priorities sorted high to low.
        self.waiting: dict[int, OrderedDict[str, deque[str]]] = {}
        self.priorities: list[int] = []
        self.count = 0

    def refill(self, now: float) -> None:
        if self.gate.max is None and now > self.stamp:
            self.tokens = min(float(self.gate.burst), self.tokens + (now - self.stamp) * self.gate.rate)
            self.stamp = now

    def room(self, now: float) -> bool:
        gate = self.gate
        if gate.max is not None:
            return self.in_use < gate.max
        self.refill(now)
        # A hair of slack for float error: a token due "now" is there.
        return self.tokens >= 1.0 - 1e-9 and self.in_use < gate.burst

    def next_token_in(self, now: float) -> float:
        self.refill(now)
        if self.gate.max is not None or self.tokens >= 1.0 - 1e-9:
            return 0.0
        return (1.0 - self.tokens) / self.gate.rate

    def idle(self, now: float) -> bool:
        if self.in_use or self.count:
            return False
        self.refill(now)
        return self.gate.max is not None or self.tokens >= self.gate.burst


@dataclass(slots=True)
class _Parked:
    execution_id: str
    budget: str
    gates: tuple[Gate, ...]
    key: str
    priority: int


class FlowControl:
    def __init__(self) -> None:
        self._budgets: dict[str, _Budget] = {}
        # Admitted executions and the gates they hold; rate gates until placed, the rest until released.
        self._held: dict[str, tuple[Gate, ...]] = {}
        self._unplaced: dict[str, tuple[Gate, ...]] = {}
        self._parked: dict[str, _Parked] = {}
        # Rate budgets with waiting work: when their next token is due (the caller arms a timer).
        self.wakeups: dict[str, float] = {}
        # Per limit: how many times an execution had to wait for a token (flux_rate_limited_total).
        self.rate_limited: dict[str, int] = {}

    # ----------------------------------------------------------------- reads

    def holds(self, execution_id: str) -> bool:
        return execution_id in self._held

    def waiting(self, execution_id: str) -> bool:
        return execution_id in self._parked

    def __len__(self) -> int:
        """Executions waiting on a budget."""
        return len(self._parked)

    def blocked(self, execution_id: str, now: float) -> Blocked | None:
        parked = self._parked.get(execution_id)
        if parked is None:
            return None
        budget = self._budgets[parked.budget]
        return Blocked(budget.gate, budget.in_use, budget.next_token_in(now))

    def usage(self) -> Iterator[tuple[Gate, int, int]]:
        """(gate, in use, waiting) of every budget with either."""
        for budget in self._budgets.values():
            if budget.in_use or budget.count:
                yield budget.gate, budget.in_use, budget.count

    # ----------------------------------------------------------------- changes

    def admit(self, execution_id: str, gates: tuple[Gate, ...], key: str, priority: int, now: float) -> bool:
        """True: every budget had room and is charged (queue it now). False: it waits on the first
        budget without room and comes back from ``release``/``placed``/``refill`` when that frees."""
        if execution_id in self._held:
            return True
        if execution_id in self._parked:
            return False
        for gate in gates:
            budget = self._budgets.get(gate.budget)
            if budget is None:
                budget = self._budgets[gate.budget] = _Budget(gate, now)
            elif budget.gate is not gate and budget.gate != gate:  # the same object: a batch's members
                budget.gate = gate  # a limit changed live: its new terms apply from now
            if not budget.room(now):
                self._park(execution_id, budget, gates, key, priority, now)
                return False
        for gate in gates:
            budget = self._budgets[gate.budget]
            budget.in_use += 1
            if gate.max is None:
                budget.tokens -= 1.0
        self._held[execution_id] = gates
        rates = tuple(g for g in gates if g.max is None)
        if rates:
            self._unplaced[execution_id] = rates
        return True

    def force(self, execution_id: str, gates: tuple[Gate, ...], now: float) -> None:
        """Charge what already runs (found on recovery), whatever the budget says: it holds the slot."""
        if execution_id in self._held:
            return
        self.release(execution_id, now)
        for gate in gates:
            budget = self._budgets.get(gate.budget)
            if budget is None:
                budget = self._budgets[gate.budget] = _Budget(gate, now)
            budget.in_use += 1
        self._held[execution_id] = gates

    def placed(self, execution_id: str, now: float) -> list[str]:
        """A pass placed it: its rate budgets may admit more. Returns the ids admitted."""
        rates = self._unplaced.pop(execution_id, None)
        if rates is None:
            return []
        return self._free(rates, now)

    def release(self, execution_id: str, now: float) -> list[str]:
        """It no longer runs or waits (ended, requeued, cancelled, moved): what it held frees, and
        whatever that lets in is admitted. Returns the ids admitted. Idempotent."""
        parked = self._parked.pop(execution_id, None)
        if parked is not None:
            budget = self._budgets[parked.budget]
            budget.count -= 1  # its id stays in the deque, skipped when it comes up
            self._drop_if_idle(budget, now)
            return []
        gates = self._held.pop(execution_id, None)
        if gates is None:
            return []
        freeing = [g for g in gates if g.max is not None]
        rates = self._unplaced.pop(execution_id, None)
        if rates is not None:
            freeing.extend(rates)
        return self._free(tuple(freeing), now)

    def refund(self, execution_id: str, now: float) -> None:
        """Its placement started nothing (a replica's claim refused by the cluster's shared bucket):
        give back the token each of its rate budgets took, so that the next try is not also held
        back by this replica's own bucket. Before ``release``, which forgets what it held."""
        for gate in self._held.get(execution_id, ()):
            budget = self._budgets.get(gate.budget)
            if gate.max is None and budget is not None:
                budget.refill(now)
                budget.tokens = min(float(gate.burst), budget.tokens + 1.0)

    def refill(self, budget_name: str, now: float) -> list[str]:
        """A token is due on ``budget_name``: admit what it lets in."""
        self.wakeups.pop(budget_name, None)
        budget = self._budgets.get(budget_name)
        return [] if budget is None else self._wake(budget, now)

    def parked_ids(self) -> list[str]:
        """Every waiting execution, in the order it came to wait."""
        return list(self._parked)

    def retune(self, gates: dict[str, Gate], now: float) -> list[str]:
        """New terms for budgets (a named limit changed live): each applies from now, and what the
        new terms let in is admitted. Returns the ids admitted. The caller first takes out (``release``)
        and admits again the waiting work whose gates name these budgets, so no stale gate comes back."""
        admitted: list[str] = []
        for name, gate in gates.items():
            budget = self._budgets.get(name)
            if budget is None or budget.gate == gate:
                continue
            budget.gate = gate
            if gate.max is None:
                budget.tokens = min(budget.tokens, float(gate.burst))
            admitted.extend(self._wake(budget, now))
            self._drop_if_idle(budget, now)
        return admitted

    # ----------------------------------------------------------------- inside

    def _free(self, gates: tuple[Gate, ...], now: float) -> list[str]:
        admitted: list[str] = []
        for gate in gates:
            budget = self._budgets.get(gate.budget)
            if budget is None:
                continue
            budget.in_use -= 1
            admitted.extend(self._wake(budget, now))
            self._drop_if_idle(budget, now)
        return admitted

    def _park(
        self, execution_id: str, budget: _Budget, gates: tuple[Gate, ...], key: str, priority: int, now: float
    ) -> None:
        keys = budget.waiting.get(priority)
        if keys is None:
            keys = budget.waiting[priority] = OrderedDict()
            budget.priorities.append(priority)
            budget.priorities.sort(reverse=True)
        ids = keys.get(key)
        if ids is None:
            ids = keys[key] = deque()
        ids.append(execution_id)
        budget.count += 1
        self._parked[execution_id] = _Parked(execution_id, budget.gate.budget, gates, key, priority)
        gate = budget.gate
        if gate.max is None:
            self.rate_limited[gate.limit] = self.rate_limited.get(gate.limit, 0) + 1
            self._arm(budget, now)

    def _arm(self, budget: _Budget, now: float) -> None:
        wait = budget.next_token_in(now)
        if wait > 0 and budget.gate.budget not in self.wakeups:
            self.wakeups[budget.gate.budget] = now + wait

    def _next(self, budget: _Budget) -> _Parked | None:
        """The next waiting execution in turn (highest priority, then the key whose turn it is)."""
        while budget.priorities:
            priority = budget.priorities[0]
            keys = budget.waiting[priority]
            while keys:
                key, ids = next(iter(keys.items()))
                while ids:
                    execution_id = ids.popleft()
                    parked = self._parked.get(execution_id)
                    if parked is not None and parked.budget == budget.gate.budget:
                        if ids:
                            keys.move_to_end(key)  # its turn is used: the next key goes next
                        else:
                            del keys[key]
                        del self._parked[execution_id]
                        budget.count -= 1
                        return parked
                del keys[key]
            del budget.waiting[priority]
            budget.priorities.pop(0)
        return None

    def _wake(self, budget: _Budget, now: float) -> list[str]:
        admitted: list[str] = []
        while budget.count and budget.room(now):
            parked = self._next(budget)
            if parked is None:
                break
            # It may wait on another of its budgets now; then it is parked there.
            if self.admit(parked.execution_id, parked.gates, parked.key, parked.priority, now):
                admitted.append(parked.execution_id)
        if budget.count and budget.gate.max is None:
            self._arm(budget, now)
        return admitted

    def _drop_if_idle(self, budget: _Budget, now: float) -> None:
        # A key that nothing holds or waits on costs nothing: 100,000 keys come and go.
        if budget.idle(now):
            del self._budgets[budget.gate.budget]
            self.wakeups.pop(budget.gate.budget, None)
