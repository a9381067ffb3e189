"""An in-memory ``Store`` with SqliteStore's semantics, for dispatcher tests.

The dicts play the database file: they outlive a ``Dispatcher``, so a second
one opened over the same store recovers what the first committed. ``save``
queues the row and commits the batch on the next event-loop iteration, so a
caller that did not await the future has not made the row durable yet.
"""

from __future__ import annotations

import asyncio
import dataclasses
from types import MappingProxyType

from flux.domain.batch import Batch
from flux.domain.execution import Execution, State
from flux.domain.workflow import WorkflowRecord
from flux.store.base import (
    AUDIT_KEPT,
    AuditRecord,
    ExecutionQuery,
    Recovered,
    Store,
    TokenRecord,
    WorkerIdentity,
)
from flux.store.rows import check_owner


class MemoryStore(Store):
    def __init__(self) -> None:
        self.sources: dict[str, tuple[str, str]] = {}
        self.workflows: dict[tuple[str, int], WorkflowRecord] = {}
        self.executions: dict[str, Execution] = {}  # committed rows only
        self.workers: dict[str, WorkerIdentity] = {}
        self.pools: dict[str, str] = {}
        self.tenants: dict[str, str] = {}
        self.limits: dict[tuple[str, str], str] = {}
        self.batches: dict[str, Batch] = {}
        self.tokens: dict[str, TokenRecord] = {}  # by digest
        self.audit: list[AuditRecord] = []  # oldest first
        self.fail_next_commit: Exception | None = None
        self._queued: dict[str, Execution] = {}
        self._batch: asyncio.Future[None] | None = None

    async def open(self) -> Recovered:
        executions = self.executions.values()
        return Recovered(
            workflows=sorted(self.workflows.values(), key=lambda r: (r.name, r.version)),
            unfinished=sorted((e for e in executions if not e.state.finished), key=lambda e: e.seq),
            workers=list(self.workers.values()),
            next_seq=max((e.seq for e in executions), default=0) + 1,
        )

    async def close(self) -> None:
        self._commit()

    async def register_workflows(
        self, filename: str, source: str, source_hash: str, workflows: list[WorkflowRecord]
    ) -> list[WorkflowRecord]:
        self.sources.setdefault(source_hash, (filename, source))
        stored = []
        for wf in workflows:
            version = max((v for n, v in self.workflows if n == wf.name), default=0) + 1
            check_owner(self.workflows.get((wf.name, version - 1)), wf)
            record = dataclasses.replace(
                wf,
                version=version,
                source_hash=source_hash,
                affinity=MappingProxyType(dict(wf.affinity)),
                filename=filename,
            )
            latest = self.workflows.get((wf.name, version - 1))
            if latest is not None and latest.same_definition(record):
                stored.append(dataclasses.replace(latest, filename=filename, unchanged=True))
                continue
            self.workflows[(wf.name, version)] = record
            stored.append(record)
        return stored

    async def save_pools(self, pools: list[tuple[str, str]]) -> None:
        self.pools.update(pools)

    async def list_pools(self) -> list[tuple[str, str]]:
        return sorted(self.pools.items())

    async def save_tenants(self, tenants: list[tuple[str, str]]) -> None:
        self.tenants.update(tenants)

    async def delete_tenant(self, name: str, tombstone: str) -> bool:
        self.tokens = {d: t for d, t in self.tokens.items() if t.tenant != name}
        for key, execution in self.executions.items():
            if execution.tenant == name:
                self.executions[key] = dataclasses.replace(execution, tenant=tombstone)
        for key, record in self.workflows.items():
            if record.tenant == name:
                self.workflows[key] = dataclasses.replace(record, tenant=tombstone)
        return self.tenants.pop(name, None) is not None

    async def list_tenants(self) -> list[tuple[str, str]]:
        return sorted(self.tenants.items())

    async def save_limits(self, limits: list[tuple[str, str, str]]) -> None:
        self.limits.update({(tenant, name): spec for tenant, name, spec in limits})

    async def delete_limit(self, tenant: str, name: str) -> bool:
        return self.limits.pop((tenant, name), None) is not None

    async def list_limits(self, tenant: str = "") -> list[tuple[str, str, str]]:
        return [(t, n, spec) for (t, n), spec in sorted(self.limits.items()) if not tenant or t == tenant]

    async def save_token(self, token: TokenRecord) -> None:
        self.tokens[token.digest] = token

    async def find_token(self, digest: str) -> TokenRecord | None:
        return self.tokens.get(digest)

    async def list_tokens(self, tenant: str = "") -> list[TokenRecord]:
        found = [t for t in self.tokens.values() if not t.revoked and (not tenant or t.tenant == tenant)]
        return sorted(found, key=lambda t: (-t.created_at, t.id))

    async def revoke_token(self, token_id: str, tenant: str = "") -> TokenRecord | None:
        for key, token in self.tokens.items():
            if token.id == token_id and not token.revoked and (not tenant or token.tenant == tenant):
                self.tokens[key] = dataclasses.replace(token, revoked=True)
                return token
        return None

    async def touch_token(self, token_id: str, at: float) -> None:
        for key, token in self.tokens.items():
            if token.id == token_id:
                self.tokens[key] = dataclasses.replace(token, last_used_at=at)

    async def save_audit(self, entry: AuditRecord) -> None:
        self.audit = [*self.audit, entry][-AUDIT_KEPT:]

    async def list_audit(self, since: float = 0.0, tenant: str = "", limit: int = 1000) -> list[AuditRecord]:
        found = [e for e in reversed(self.audit) if e.at >= since and (not tenant or e.tenant == tenant)]
        return found[:limit]

    async def get_source(self, source_hash: str) -> tuple[str, str] | None:
        return self.sources.get(source_hash)

    def save(self, execution: Execution) -> asyncio.Future[None]:
        self._queued[execution.execution_id] = execution  # the latest row wins within a batch
        if self._batch is None:
            loop = asyncio.get_running_loop()
            self._batch = loop.create_future()
            loop.call_soon(self._commit)
        return asyncio.shield(self._batch)  # the caller's own, as Store.save promises

    def _commit(self) -> None:
        rows, batch = self._queued, self._batch
        self._queued, self._batch = {}, None
        if batch is None or batch.done():
            return
        if self.fail_next_commit is not None:
            error, self.fail_next_commit = self.fail_next_commit, None
            batch.set_exception(error)  # the whole batch is lost, as a rolled-back transaction
            return
        for execution_id, row in rows.items():
            # As the SQL upserts: the input is written once, with the first row.
            first = self.executions.get(execution_id)
            self.executions[execution_id] = row.evolve(input_json=first.input_json) if first else row
        batch.set_result(None)

    async def reopen(self, execution: Execution) -> bool:
        stored = self.executions.get(execution.execution_id)
        if stored is None or stored.state is not State.FAILED:
            return False
        self.executions[execution.execution_id] = execution.evolve(input_json=stored.input_json)
        return True

    async def get_execution(self, execution_id: str) -> Execution | None:
        return self._queued.get(execution_id) or self.executions.get(execution_id)

    async def get_input(self, execution_id: str) -> str | None:
        stored = self.executions.get(execution_id)
        return stored.input_json if stored else None

    async def save_worker(self, identity: WorkerIdentity) -> None:
        self.workers[identity.name] = identity

    async def list_executions(self, query: ExecutionQuery) -> list[Execution]:
        after = query.after

        def wanted(e: Execution) -> bool:
            if after is not None and (e.seq, e.execution_id) >= after:
                return False
            return query.matches(e) or (query.unfinished_too and not e.state.finished)

        rows = [e for e in self.executions.values() if wanted(e)]
        return sorted(rows, key=lambda e: (e.seq, e.execution_id), reverse=True)[: query.limit]

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        rows = [r for r in self.workflows.values() if not name or r.name == name]
        return sorted(rows, key=lambda r: (r.name, r.version))

    async def save_batch(self, batch: Batch) -> None:
        self.batches[batch.batch_id] = batch

    async def get_batch(self, batch_id: str) -> Batch | None:
        return self.batches.get(batch_id)

    async def batch_counts(self, batch_id: str) -> dict[State, int]:
        counts: dict[State, int] = {}
        for e in self.executions.values():
            if e.batch_id == batch_id:
                counts[e.state] = counts.get(e.state, 0) + 1
        return counts

    async def batch_unfinished(self, batch_id: str) -> list[str]:
        members = [e for e in self.executions.values() if e.batch_id == batch_id and not e.state.finished]
        return [e.execution_id for e in sorted(members, key=lambda e: -e.seq)]

    async def cancel_batch(self, batch_id: str, at: float) -> bool:
        batch = self.batches.get(batch_id)
        if batch is None or batch.cancelled_at:
            return False
        self.batches[batch_id] = dataclasses.replace(batch, cancelled_at=at)
        return True
