"""The durable store's interface: what the dispatcher needs, nothing about SQL.

SQLite implements it for one server; a PostgreSQL backend implements the same
calls for several replicas (claiming with ``SELECT … FOR UPDATE SKIP LOCKED``
and waking peers with ``LISTEN/NOTIFY``). Writes are *batched*: ``save``
returns a future that resolves when the row is committed, and every save made
while a commit is in flight rides the next one, so many concurrent callers
share one transaction instead of paying one each (group_commit.py, used by both).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from flux.domain.batch import Batch
from flux.domain.execution import Execution, State
from flux.domain.resource_request import ResourceRequest
from flux.domain.tenant import DEFAULT_TENANT
from flux.domain.workflow import WorkflowRecord
from flux.errors import Unavailable

__all__ = [
    "AuditRecord", "Conflict", "ExecutionQuery", "PendingRef", "Recovered", "Store", "StoreError",
    "TokenRecord", "WorkerIdentity", "WorkerRecord", "WorkflowRecord",
]  # fmt: skip

# Audit retention: entries older than this many seconds, or beyond the newest AUDIT_KEPT, are
# dropped as new ones are written, so the table stays small on a busy cluster and a quiet one
# keeps its history (flux audit list is for "who changed this lately", not an archive).
AUDIT_DAYS = 90
AUDIT_KEPT = 100_000


@dataclass(frozen=True, slots=True)
class ExecutionQuery:
    """A listing's filters. Rows come newest submission first: (seq, execution_id) descending."""

    limit: int
    states: tuple[int, ...] = ()
    workflow: str = ""
    worker: str = ""
    # Submitted at or after this time (seconds since the epoch); 0 means no bound.
    created_after: float = 0.0
    # Continue strictly after this (seq, execution_id): the last row of the previous page.
    after: tuple[int, str] | None = None
    # Also return every unfinished row, whatever its state and worker: the dispatcher
    # holds their live state (a dispatch is not written until claimed) and filters again.
    unfinished_too: bool = False
    # Only this tenant's executions (a non-admin token's listing); "" means every tenant's.
    tenant: str = ""

    def matches(self, execution: Execution) -> bool:
        return (
            (not self.tenant or execution.tenant == self.tenant)
            and (not self.states or int(execution.state) in self.states)
            and (not self.workflow or execution.workflow.name == self.workflow)
            and (not self.worker or execution.worker == self.worker)
            and execution.created_at >= self.created_after
        )


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A tenant's API token as stored: its digest, never the token itself."""

    id: str
    digest: str
    tenant: str
    role: str
    created_at: float
    name: str = ""
    # Seconds since the epoch; None: never expires.
    expires_at: float | None = None
    # To the minute (see flux.dispatcher.state.tenants); None: never used.
    last_used_at: float | None = None
    revoked: bool = False
    # A worker token's pool (role "worker", no tenant): it registers workers of that pool only.
    pool: str = ""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One administrative change: who (the caller's token id, tenant, role), what, when."""

    at: float
    token_id: str
    caller_tenant: str
    caller_role: str
    action: str
    target: str
    # The tenant the change is about; "" for the cluster's own (pools, workers).
    tenant: str
    details_json: str = "{}"


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """A worker's name and session token, kept so a restarted server recognises it."""

    name: str
    session_token: str


@dataclass(slots=True)
class Recovered:
    """What a starting server reloads: everything needed to resume without loss."""

    workflows: list[WorkflowRecord] = field(default_factory=list)
    unfinished: list[Execution] = field(default_factory=list)
    workers: list[WorkerIdentity] = field(default_factory=list)
    next_seq: int = 1


class StoreError(Unavailable, RuntimeError):
    """The database cannot be used: unreachable, a bad URL, or a schema newer than this Flux.

    An ``Unavailable``: a request that meets it is answered UNAVAILABLE (503), which callers retry.
    """


class Conflict(Exception):
    """A guarded write found the row changed by someone else (another replica, a client's cancel)."""

    def __init__(self, execution_id: str):
        super().__init__(f"execution {execution_id} was changed elsewhere")
        self.execution_id = execution_id


@dataclass(frozen=True, slots=True)
class Held:
    """``count`` executions of ``tenant`` holding ``requests`` each (SCHEDULED or RUNNING), on
    workers of this replica (``mine``) or of the others: what quotas count, cluster-wide."""

    tenant: str
    requests: ResourceRequest
    mine: bool
    count: int


@dataclass(frozen=True, slots=True)
class PendingRef:
    """A pending execution announced by another replica: enough to queue it by shape."""

    execution_id: str
    seq: int
    workflow_name: str
    workflow_version: int
    tenant: str = DEFAULT_TENANT
    # A retry's stored wait: not dispatched before this (seconds since the epoch); 0 at once.
    not_before: float = 0.0
    # The row's generation: a replica that fails the row while it waits (its pending timeout,
    # --infeasible-after) does so only if it is still CREATED at this one (Store.fail_waiting).
    generation: int = 0
    # When it was submitted (its pending timeout counts from here); 0: not said (an older replica).
    created_at: float = 0.0
    attempt: int = 1
    # Whether an attempt of it ever ran (then it has no pending timeout to wait out).
    started: bool = False
    # Its dependencies (Execution.after, when, waiting): a waiting one is mirrored into every
    # replica's dependency index, never into the queue, so whichever replica ends its last
    # dependency releases it in that same commit.
    after: tuple[str, ...] = ()
    when: str = ""
    waiting: int = 0
    # A gang's size (its run's, perhaps not its workflow's); 0 for an ordinary execution.
    gang_size: int = 0

    @classmethod
    def of(cls, e: Execution) -> PendingRef:
        return cls(
            e.execution_id, e.seq, e.workflow.name, e.workflow.version, e.tenant, e.not_before,
            e.generation, e.created_at, e.attempt, bool(e.attempts), e.after, e.when, e.waiting,
            e.gang.size if e.gang is not None else 0,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A worker as the shared database knows it."""

    name: str
    session_token: str
    replica: str
    connected: bool
    replica_alive: bool
    # When its stream was last known up (epoch seconds): its grace period runs from here.
    gone_since: float = 0.0


class Store(abc.ABC):
    # The driver's errors that mean the database cannot be reached right now (restarting, a
    # dropped connection, a pool timing out): requests that meet one are answered UNAVAILABLE
    # through flux.errors.refusal, not as a fault of the server's own.
    unavailable: tuple[type[BaseException], ...] = ()

    @abc.abstractmethod
    async def open(self) -> Recovered:
        """Create or migrate the schema and return the state to resume from."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Commit what is queued and release the database."""

    @abc.abstractmethod
    async def register_workflows(
        self, filename: str, source: str, source_hash: str, workflows: list[WorkflowRecord]
    ) -> list[WorkflowRecord]:
        """Store the source and each workflow as its next version, atomically; return them versioned.

        A workflow whose latest version has the same source and metadata is not stored
        again: that version comes back, marked ``unchanged``.
        """

    @abc.abstractmethod
    async def get_source(self, source_hash: str) -> tuple[str, str] | None:
        """(filename, source) for a content hash."""

    @abc.abstractmethod
    def save(self, execution: Execution) -> asyncio.Future[None]:
        """Queue the execution's full row for the next batch; the future resolves once committed.

        The future is the caller's own: cancelling it (its caller went away) cancels neither the
        write nor the wait of anyone else whose row is in the same batch.
        """

    def save_many(self, executions: list[Execution]) -> asyncio.Future[None]:
        """``save`` for many rows, with one future for them all (a bulk submission)."""
        return asyncio.ensure_future(_all(self.save(e) for e in executions))

    @abc.abstractmethod
    async def reopen(self, execution: Execution) -> bool:
        """Write ``execution`` (CREATED again: a manual retry) over its row only if that row is still
        FAILED; whether it did. Committed before this returns; replicas hear of it as pending."""

    @abc.abstractmethod
    async def get_execution(self, execution_id: str) -> Execution | None:
        """Read one execution (finished ones are not kept in memory)."""

    async def get_executions(self, execution_ids: list[str]) -> dict[str, Execution]:
        """Read several executions (a dependent's dependencies); the ids not found are left out.
        Stores with a query for it override this loop."""
        found = {}
        for execution_id in execution_ids:
            execution = await self.get_execution(execution_id)
            if execution is not None:
                found[execution_id] = execution
        return found

    @abc.abstractmethod
    async def get_input(self, execution_id: str) -> str | None:
        """An execution's input as first stored (inputs never change, and saves never rewrite them).

        The dispatcher keeps large pending inputs only here and reads them back at dispatch.
        """

    @abc.abstractmethod
    async def save_worker(self, identity: WorkerIdentity) -> None:
        """Remember a worker's session token across restarts."""

    @abc.abstractmethod
    async def save_pools(self, pools: list[tuple[str, str]]) -> None:
        """Store pool declarations, (name, JSON document) each, replacing those of the same name."""

    @abc.abstractmethod
    async def list_pools(self) -> list[tuple[str, str]]:
        """Every stored pool declaration, (name, JSON document), by name."""

    @abc.abstractmethod
    async def save_tenants(self, tenants: list[tuple[str, str]]) -> None:
        """Store tenants, (name, JSON document) each, replacing those of the same name, all or none."""

    @abc.abstractmethod
    async def delete_tenant(self, name: str, tombstone: str) -> bool:
        """Forget a tenant and its tokens; whether it was stored. In the same transaction its
        executions and workflows move to tenant ``tombstone`` (a name no tenant can have), so a
        tenant created again under ``name`` sees none of them."""

    @abc.abstractmethod
    async def list_tenants(self) -> list[tuple[str, str]]:
        """Every stored tenant, (name, JSON document), by name."""

    @abc.abstractmethod
    async def save_limits(self, limits: list[tuple[str, str, str]]) -> None:
        """Store named limits, (tenant, name, JSON document) each, replacing those of the same
        tenant and name, all or none."""

    @abc.abstractmethod
    async def delete_limit(self, tenant: str, name: str) -> bool:
        """Forget a tenant's named limit; whether it was stored."""

    @abc.abstractmethod
    async def list_limits(self, tenant: str = "") -> list[tuple[str, str, str]]:
        """Named limits (of ``tenant`` only, when given), (tenant, name, JSON document), by tenant and name."""

    @abc.abstractmethod
    async def save_token(self, token: TokenRecord) -> None:
        """Store an API token by its digest (never the token itself)."""

    @abc.abstractmethod
    async def find_token(self, digest: str) -> TokenRecord | None:
        """The token with this digest, revoked or expired too, or None."""

    @abc.abstractmethod
    async def list_tokens(self, tenant: str = "") -> list[TokenRecord]:
        """Tokens not revoked (of ``tenant`` only, when given), newest first."""

    @abc.abstractmethod
    async def revoke_token(self, token_id: str, tenant: str = "") -> TokenRecord | None:
        """Revoke the token with this id (only if it is ``tenant``'s, when given); None when
        there is no such token not yet revoked."""

    @abc.abstractmethod
    async def touch_token(self, token_id: str, at: float) -> None:
        """Record that the token was used at ``at``."""

    @abc.abstractmethod
    async def save_audit(self, entry: AuditRecord) -> None:
        """Append an audit entry, dropping those past retention (AUDIT_DAYS, AUDIT_KEPT)."""

    @abc.abstractmethod
    async def list_audit(self, since: float = 0.0, tenant: str = "", limit: int = 1000) -> list[AuditRecord]:
        """Up to ``limit`` audit entries at or after ``since`` (about ``tenant`` only, when
        given), newest first."""

    @abc.abstractmethod
    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        """Up to ``query.limit`` committed rows that match it, newest submission first."""

    @abc.abstractmethod
    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        """Every registered version (of ``name`` only, when given), by name then version."""

    @abc.abstractmethod
    async def save_batch(self, batch: Batch) -> None:
        """Store a new batch (its members are saved as executions naming it)."""

    @abc.abstractmethod
    async def get_batch(self, batch_id: str) -> Batch | None:
        """The batch with this id, or None."""

    @abc.abstractmethod
    async def batch_counts(self, batch_id: str) -> dict[State, int]:
        """How many of the batch's members each state has, as committed."""

    @abc.abstractmethod
    async def batch_unfinished(self, batch_id: str) -> list[str]:
        """The ids of the batch's members not finished as committed, newest first."""

    @abc.abstractmethod
    async def cancel_batch(self, batch_id: str, at: float) -> bool:
        """Mark the batch cancelled at ``at`` (it takes no new members); whether this call did."""


async def _all(saves: Iterable[asyncio.Future[None]]) -> None:
    await asyncio.gather(*saves)
