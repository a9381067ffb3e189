"""Flow control in the dispatcher: which budgets an execution needs, and the calls into the pure
``FlowControl`` (flux/matching/flow.py) on every path into and out of the queue.

An execution's gates come from its workflow's declaration and its stored keys: the workflow's
concurrency budget per key (``"c/<tenant>/<workflow>/<key>"``, every version sharing it) and its
rate budget per key (``"r/…"``), a throttled batch's budget (``"b/<batch id>"``, its
``max_concurrent``), and for each named limit it declares (``limits=["openai"]``,
state/named_limits.py) the tenant's budgets of that limit (``"lc/<tenant>/<name>/<key>"`` and
``"lr/…"``; the key is "" unless the limit is ``per_key``). Budgets are this server's: on PostgreSQL
replicas each replica admits through its own, and the claim makes concurrency exact and a rate's
bucket shared cluster-wide (modes/shared/flow_guard.py; ``cluster`` then answers ``flux limit
show`` from every replica's use, and ``shared_token`` is told when a shared bucket that refused a
claim has a token again).

What ``FlowControl`` admits later (a slot freed, a token came due) is queued here with a fresh
place in line, so a key that gets a slot back goes behind the other keys already waiting for a
worker: round-robin across keys holds at the workers too, not only at the budgets.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from flux.dispatcher.state.deadlines import SHARED_BUCKET, Kind
from flux.domain.batch import BATCH_KEY, BATCH_MAX_KEY
from flux.domain.execution import Execution, State
from flux.matching.flow import Blocked, FlowControl, Gate

if TYPE_CHECKING:
    from flux.domain.named_limits import NamedLimit
    from flux.domain.workflow import WorkflowRecord

# What metrics call every batch's max_concurrent budget (summed): no workflow or limit has a "/".
BATCH_LIMIT = "batch/max_concurrent"
# A tenant's named limit by (tenant, name); None while it is not created (it limits nothing then).
Named = Callable[[str, str], "NamedLimit | None"]


def named_prefixes(tenant: str, name: str) -> tuple[str, str]:
    """The budget names of a tenant's named limit start with one of these."""
    return f"lc/{tenant}/{name}/", f"lr/{tenant}/{name}/"


def named_gates(tenant: str, limit: NamedLimit, key: str) -> tuple[Gate, ...]:
    """The budgets of one named limit for an execution of ``key`` (ignored unless per key)."""
    key = key if limit.per_key else ""
    concurrency, rate = named_prefixes(tenant, limit.name)
    label = f"limit {limit.name}" + (f" key {key}" if limit.per_key else "")
    gates: list[Gate] = []
    if limit.concurrency is not None:
        gates.append(Gate(concurrency + key, label, max=limit.concurrency, limit=limit.name))
    if limit.rate is not None:
        gates.append(
            Gate(rate + key, f"rate {label}", rate=limit.per_second, burst=limit.burst or 1, limit=limit.name)
        )
    return tuple(gates)


def gates_of(record: WorkflowRecord, execution: Execution, named: Named | None = None) -> tuple[Gate, ...]:
    """The budgets ``execution`` needs (none for an unlimited workflow)."""
    if record.flow.empty:  # a batch's member at most: no dict, no lookups
        return _keyed_batch_gates(execution.flow_keys)
    return gates_for(record, execution.tenant, dict(execution.flow_keys), named)


def gates_for(
    record: WorkflowRecord, tenant: str, keys: dict[str, str], named: Named | None = None
) -> tuple[Gate, ...]:
    """The budgets an execution of ``record`` in ``tenant`` with these flow keys needs."""
    flow = record.flow
    batch = batch_gates(keys)
    if flow.empty:
        return batch
    gates: list[Gate] = []
    scope = f"{tenant}/{record.name}"
    if flow.concurrency is not None:
        c = flow.concurrency
        key = keys.get("concurrency", "")
        label = f"key {c.key}={key}" if c.key is not None or key else f"workflow {record.name}"
        gates.append(Gate(f"c/{scope}/{key}", label, max=c.max, limit=record.name))
    if flow.rate_limit is not None:
        r = flow.rate_limit
        key = keys.get("rate_limit", "")
        label = f"rate limit {record.name}" + (f" {r.key or 'key'}={key}" if key else "")
        gates.append(Gate(f"r/{scope}/{key}", label, rate=r.per_second, burst=r.bucket, limit=record.name))
    if named is not None:
        for name in flow.limits:
            limit = named(tenant, name)
            if limit is not None:
                gates.extend(named_gates(tenant, limit, keys.get("limits", "")))
    return (*gates, *batch)


def batch_gates(keys: dict[str, str]) -> tuple[Gate, ...]:
    """The concurrency budget of a throttled batch's member (``"b/<batch id>"``), from its flow keys
    alone (flux/domain/batch.py), so a replica that never saw the batch derives the same gate."""
    batch_id = keys.get(BATCH_KEY)
    if not batch_id:
        return ()
    return _batch_gate(batch_id, keys[BATCH_MAX_KEY])


@functools.lru_cache(maxsize=1024)
def _keyed_batch_gates(flow_keys: tuple[tuple[str, str], ...]) -> tuple[Gate, ...]:
    return batch_gates(dict(flow_keys))


@functools.lru_cache(maxsize=1024)
def _batch_gate(batch_id: str, most: str) -> tuple[Gate, ...]:
    # One per batch, not one per member: a 100,000-member batch is admitted member by member.
    return (Gate(f"b/{batch_id}", f"batch {batch_id}", max=int(most), limit=BATCH_LIMIT),)


def fair_key(execution: Execution) -> str:
    """The key it takes turns by: its concurrency key, else its rate key."""
    return _fair_key(execution.flow_keys)


@functools.lru_cache(maxsize=4096)
def _fair_key(flow_keys: tuple[tuple[str, str], ...]) -> str:
    # A batch's members (and the runs of one key) share their keys: looked up once, not per member.
    keys = dict(flow_keys)
    return keys.get("concurrency", keys.get("rate_limit", ""))


class FlowUsage:
    """The dispatcher's ``FlowControl`` and the glue around it."""

    def __init__(self, d: Any, clock: Callable[[], float], named: Named | None = None):
        # The dispatcher's Handle (typed loosely: handle.py names this class, so no import back).
        self.d = d
        self.clock = clock
        self.control = FlowControl()
        # The tenants' named limits, read at each admission (a change applies from then on).
        self.named = named
        # Replicas: every replica's use of the concurrency budgets, {budget: in use} (the binder sets it).
        self.cluster: Callable[[], Awaitable[dict[str, int]]] | None = None
        # Replicas: a shared bucket that refused a claim has a token again (the feed rereads the rows).
        self.shared_token: Callable[[], None] | None = None

    def admit(self, execution: Execution) -> bool:
        """Whether ``execution`` may enter the queue now (charged if so); else it waits here."""
        record = self.d.catalogue.record_of(execution)
        if not execution.flow_keys and record.flow.empty:
            return True
        gates = gates_of(record, execution, self.named)
        if not gates:
            return True
        admitted = self.control.admit(
            execution.execution_id, gates, fair_key(execution), execution.priority, self.clock()
        )
        if self.control.wakeups:
            self._arm()
        return admitted

    def placed(self, execution_id: str) -> None:
        if self.control.holds(execution_id):
            self._queue(self.control.placed(execution_id, self.clock()))

    def release(self, execution_id: str) -> None:
        """It left the queue or its worker (ended, requeued, cancelled): give back what it held."""
        if self.control.holds(execution_id) or self.control.waiting(execution_id):
            self._queue(self.control.release(execution_id, self.clock()))

    def refund(self, execution_id: str) -> None:
        """A claim refused by the cluster's shared bucket: the local token it took started nothing."""
        self.control.refund(execution_id, self.clock())

    def held(self, execution_id: str) -> None:
        """Found held by a worker (recovery, a mirror): charged whatever the budget says, since it runs."""
        if self.control.holds(execution_id):
            return
        execution = self.d.table.get(execution_id)
        if execution is None or not execution.flow_keys:
            return
        record = self.d.catalogue.record_of(execution)
        gates = tuple(g for g in gates_of(record, execution, self.named) if g.max is not None)
        if gates:
            self.control.force(execution_id, gates, self.clock())

    def refill(self, budget: str, bucket: int = 0) -> bool:
        if bucket == SHARED_BUCKET:
            if self.shared_token is not None:
                self.shared_token()
            return False
        admitted = self.control.refill(budget, self.clock())
        self._queue(admitted)
        self._arm()
        return bool(admitted)

    def limit_changed(self, tenant: str, name: str) -> None:
        """A tenant's named limit was created, changed or deleted: it applies to waiting work now.

        The waiting executions that name it are taken out and admitted again with their gates
        as they are now (in the order they came to wait), after the budgets in use took the new
        terms. Costs a scan of the waiting work: an administrator's change, not a hot path."""
        d, now = self.d, self.clock()
        affected: list[Execution] = []
        for execution_id in self.control.parked_ids():
            execution = d.table.get(execution_id)
            if execution is None or execution.tenant != tenant:
                continue
            if name in d.catalogue.record_of(execution).flow.limits:
                self.control.release(execution_id, now)
                affected.append(execution)
        limit = self.named(tenant, name) if self.named is not None else None
        terms = {g.budget: g for g in named_gates(tenant, limit, "")} if limit is not None else {}
        retuned: dict[str, Gate] = {}
        for gate, _, _ in list(self.control.usage()):
            prefix = next((p for p in named_prefixes(tenant, name) if gate.budget.startswith(p)), None)
            if prefix is not None:
                fresh = terms.get(prefix)  # the limit's gates for key "" are named by the prefixes
                if fresh is not None:
                    retuned[gate.budget] = Gate(
                        gate.budget, gate.label, fresh.max, fresh.rate, fresh.burst, name
                    )
        admitted = self.control.retune(retuned, now)
        for execution in affected:
            if self.control.admit(
                execution.execution_id, gates_of(d.catalogue.record_of(execution), execution, self.named),
                fair_key(execution), execution.priority, now,
            ):  # fmt: skip
                admitted.append(execution.execution_id)
        self._queue(admitted)

    def limit_usage(self, tenant: str, name: str) -> list[tuple[str, int, int]]:
        """(key, in use, waiting) of a named limit, busiest first ("" is the whole tenant's)."""
        keys: dict[str, list[int]] = {}
        for gate, in_use, waiting in self.control.usage():
            if gate.budget.startswith(named_prefixes(tenant, name)):
                row = keys.setdefault(gate.budget.split("/", 3)[3], [0, 0])
                row[0] = max(row[0], in_use)
                row[1] += waiting
        return sorted(((k, u, w) for k, (u, w) in keys.items()), key=lambda r: (-r[1] - r[2], r[0]))

    async def cluster_usage(self, tenant: str, name: str) -> list[tuple[str, int, int]]:
        """``limit_usage``, in use counted over every replica's workers where replicas share a store."""
        usage = self.limit_usage(tenant, name)
        limit = self.named(tenant, name) if self.named is not None else None
        if self.cluster is None or limit is None or limit.concurrency is None:
            return usage  # a rate's use (admitted, not yet placed) is this replica's
        concurrency = named_prefixes(tenant, name)[0]
        in_use = {
            b[len(concurrency) :]: n for b, n in (await self.cluster()).items() if b.startswith(concurrency)
        }
        keys = {k: [in_use.pop(k, 0), w] for k, _, w in usage}
        keys.update((k, [n, 0]) for k, n in in_use.items())
        return sorted(((k, u, w) for k, (u, w) in keys.items()), key=lambda r: (-r[1] - r[2], r[0]))

    def blocked(self, execution_id: str) -> Blocked | None:
        return self.control.blocked(execution_id, self.clock())

    def _queue(self, admitted: list[str]) -> None:
        d = self.d
        shapes = []
        for execution_id in admitted:
            execution = d.table.get(execution_id)
            if execution is None or execution.state is not State.CREATED:
                self.control.release(execution_id, self.clock())
                continue
            shape = d.catalogue.shape_of(execution)
            # A fresh place in line: behind the keys already waiting for a worker.
            d.queue.add(execution_id, shape, d.take_seq(), execution.priority, execution.created_at)
            shapes.append(shape)
        if shapes:
            d.passes.work_added(list(dict.fromkeys(shapes)))
        self._arm()

    def _arm(self) -> None:
        wakeups = self.control.wakeups
        for budget, due in list(wakeups.items()):
            if due >= 0:
                self.d.timers.arm(Kind.FLOW, budget, 0, due)
                # Armed: negative marks it so, until it fires (refill pops it).
                wakeups[budget] = -due
