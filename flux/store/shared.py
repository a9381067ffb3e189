"""What the replicas' strategies (flux/dispatcher/modes/shared/) ask of a store shared by replicas.

``SharedStore`` is the store they are given, ``ClusterMembership`` its ``cluster``:
exactly the calls those modes make, with the signatures of the PostgreSQL
implementation (flux/store/postgres/), which is one of them; the unit tests
drive the modes on an in-memory one (tests/unit/shared_memory_store.py).
tests/unit/test_handle.py compares both, member by member, with these.

Beside base.py rather than in it: ``subscribe`` hands out ``notices.Notice``,
and notices.py imports ``PendingRef`` from base.py, so naming it there would
be an import cycle.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from flux.domain.execution import Execution, ExecutionError
from flux.domain.workflow import WorkflowRecord
from flux.store.base import Held, PendingRef, WorkerRecord
from flux.store.notices import Notice

__all__ = ["Bucket", "ClusterMembership", "FlowGuard", "FlowRow", "QuotaGuard", "SharedStore"]

# Given what every tenant holds and the dispatches of one claim (in placement order), the ids
# that claim must not take. The dispatcher's quotas make it; the store applies it in the claim.
QuotaGuard = Callable[[list[Held], list[Execution]], set[str]]


@dataclass(frozen=True, slots=True)
class FlowRow:
    """A flow-limited row as the claim reads it: enough to name the budgets it needs."""

    execution_id: str
    tenant: str
    workflow_name: str
    workflow_version: int
    flow_keys: tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Bucket:
    """A rate budget's token bucket shared by the replicas (PostgreSQL's ``flow_buckets``)."""

    tokens: float
    # When ``tokens`` was last refilled, on the database's clock (every replica reads the same one).
    updated_at: float
    # When it is full again if nothing takes a token (the guard sets it from the rate and burst):
    # from then on its row says no more than a missing one, and may be pruned.
    full_at: float = math.inf


class FlowGuard(Protocol):
    """The claim's flow control over the cluster. The dispatcher makes it
    (modes/shared/flow_guard.py); the store applies it inside the claim's transaction."""

    def rates(self, wanted: list[FlowRow]) -> set[str]:
        """The rate budgets the claim's limited rows need: the store reads their buckets."""
        ...

    def __call__(
        self, held: list[FlowRow], wanted: list[FlowRow], buckets: dict[str, Bucket], now: float
    ) -> set[str]:
        """Given the limited rows every replica's workers hold (SCHEDULED, RUNNING), the claim's
        limited rows (in placement order), the shared buckets of ``rates`` (a missing one is
        full; the guard adds it) and the time: the ids the claim must not take, because a
        concurrency budget is full or a bucket has no token. Takes the tokens of what it admits
        from ``buckets``, which the store writes back in the same transaction."""
        ...


@runtime_checkable
class ClusterMembership(Protocol):
    """The replicas and the workers they hold, as every replica sees them (``SharedStore.cluster``)."""

    # The ownership epoch of each worker as this replica last took it: a move announced with
    # an older one is stale. Read by the modes, written by the membership's own calls.
    epochs: dict[str, int]

    async def announce(self, address: str) -> None:
        """Publish the address this replica serves on, for the other replicas to see."""

    async def get_worker(self, name: str, replica_timeout: float) -> WorkerRecord | None:
        """A worker as the cluster knows it (which replica holds it, whether that one is alive)."""

    async def adopt_worker(self, name: str, session_token: str) -> list[Execution]:
        """Take over, for this replica, a worker another one held, with the executions it holds."""

    async def give_back_worker(self, name: str, now: float, error: ExecutionError) -> list[Execution]:
        """Requeue, for any replica to place, what a replaced worker held wherever it was connected."""

    async def forget_worker(self, name: str, now: float, error: ExecutionError) -> list[Execution] | None:
        """Drop a worker from the whole cluster and requeue what it held; None when no replica knows it."""

    async def owned(self) -> list[tuple[str, int]]:
        """(execution id, generation) of every dispatched or running row this replica owns."""

    async def give_back_owned(
        self, rows: list[tuple[str, int]], now: float, error: ExecutionError
    ) -> list[Execution]:
        """Requeue, for any replica to place, those of ``rows`` this replica still owns at that generation."""

    async def set_worker_connected(
        self, name: str, connected: bool, info: dict[str, Any] | None, load: dict[str, Any] | None
    ) -> None:
        """Publish whether this replica's worker is connected, with what it advertises (None: keep it)."""

    async def set_worker_paused(self, name: str, paused: bool) -> bool:
        """Record an operator's pause for whichever replica holds the worker; False when none knows it."""

    async def worker_paused(self, name: str) -> bool:
        """Whether the worker is paused, through any replica."""

    async def directory(self, replica_timeout: float) -> list[tuple[str, dict[str, Any]]]:
        """Workers connected to the other live replicas, with what each last advertised."""

    async def heartbeat(self, load: dict[str, dict[str, Any]]) -> None:
        """Prove this replica alive to the others and publish its workers' load."""

    async def sweep(self, dead_after: float, now: float) -> list[Execution]:
        """Requeue the work of replicas silent for ``dead_after``, unless another replica is sweeping."""


@runtime_checkable
class SharedStore(Protocol):
    """A store several replicas share: the calls the replicas' strategies make on their ``store``.

    The dispatcher's own ``Store`` calls (``save`` and the rest) go through ``Handle.store``;
    here are only those the modes make on the store they were built with.
    """

    # Settable: the binder sets it while tenants have terms, and clears it.
    quota_guard: QuotaGuard | None
    # Set by the binder at start: each claim admits only what flow control allows cluster-wide.
    flow_guard: FlowGuard | None

    @property
    def replica_id(self) -> str:
        """This replica's name in the cluster: what its notices and its rows' owner say."""

    @property
    def cluster(self) -> ClusterMembership:
        """Membership: the replicas and their workers, cluster-wide."""

    @property
    def unavailable(self) -> tuple[type[BaseException], ...]:
        """The errors that mean the shared database cannot be reached right now (``Store.unavailable``)."""

    def subscribe(self, callback: Callable[[Notice], None]) -> None:
        """Call ``callback`` with each notice any replica (this one too) sends."""

    def claim(
        self, dispatches: list[Execution], with_rows: bool = False
    ) -> asyncio.Future[dict[str, Execution]]:
        """Claim pending rows for this replica's dispatches; resolves with the rows won, by id.
        ``with_rows``: in the transaction of the next batch of rows saved, after their writes."""

    async def insert_dispatched(self, execution: Execution) -> None:
        """Store a new execution already claimed by this replica, so no other replica sees it pending."""

    async def cancel(self, execution_id: str, now: float) -> Execution | None:
        """Cancel an unfinished execution whichever replica holds it; None when finished or unknown."""

    async def cancel_many(self, execution_ids: list[str], now: float) -> list[Execution]:
        """``cancel`` for each, in one transaction: the rows it cancelled (a finished or unknown one
        is left as it is)."""

    async def fail_waiting(
        self, execution_id: str, generation: int, reason: str, error: ExecutionError, now: float
    ) -> Execution | None:
        """End a pending row FAILED with ``reason`` if it is still CREATED at ``generation`` (the row
        as it ended); None when it is not: another replica claimed or ended it first."""

    async def load_workflows(self) -> list[WorkflowRecord]:
        """Every workflow version registered through any replica."""

    async def get_execution(self, execution_id: str) -> Execution | None:
        """One execution's row as committed by any replica."""

    async def pending_refs(self) -> list[PendingRef]:
        """Every pending execution of the cluster, oldest first: the queue all replicas mirror."""

    async def held(self) -> list[Held]:
        """What every tenant holds now on every replica's workers (what quotas count)."""

    async def flow_held(self) -> list[FlowRow]:
        """Every flow-limited row held now on every replica's workers (what concurrency limits count)."""

    async def take_preemption(self, preemptor: str, now: float, stale_before: float) -> bool:
        """Whether this replica, and no other, may preempt for ``preemptor`` (still pending)."""

    async def prune_preemptions(self, stale_before: float) -> None:
        """Forget the preemptions of executions no longer pending, and those older than ``stale_before``."""

    async def prune_dispatches(self, before: float, batch: int = ...) -> int:
        """Delete the dispatch log of executions finished before ``before``; how many rows went."""

    async def prune_buckets(self) -> int:
        """Delete the rate buckets full again by now (a missing row is a full bucket); how many went."""
