"""The replica's one writer connection: execution rows in group commits, then the claims queued meanwhile.

Saves go through the shared ``GroupCommit``; what is PostgreSQL's own is here:
each row is written by a guarded upsert (``Conflict`` for a row another replica
or a client changed first), the rows that became pending or finished are
announced in the same transaction, and claims ride the same connection,
between the batches of rows (see group_commit.py for their order).

A claim made ``with_rows`` rides *inside* the next batch of rows instead: the same transaction
claims, after the upsert, what that upsert made pending. A dependent released by its dependency's
final state is claimed in the commit that writes both (modes/shared/binder.py), not in a second
transaction after it; a row it claimed is not announced as pending (no other replica could take it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from flux.domain.execution import Execution, State
from flux.store.group_commit import GroupCommit, fail
from flux.store.postgres.flow import guarded as flow_guarded
from flux.store.postgres.quota import guarded
from flux.store.postgres.rows import COLUMNS, FROM_JSON, announce, owned_row, rows_json
from flux.store.rows import CREATED, FINISHED, SCHEDULED, execution_from_row
from flux.store.shared import FlowGuard, QuotaGuard

# Insert a new execution, or update one this replica may write: the same
# generation, not finished, and either pending (shared) or owned by us.
_UPSERT = f"""
INSERT INTO executions ({COLUMNS}) {FROM_JSON}
ON CONFLICT (execution_id) DO UPDATE SET
    state=excluded.state, worker=excluded.worker, attempt=excluded.attempt, output_json=excluded.output_json,
    error=excluded.error, gpu_indices=excluded.gpu_indices, updated_at=excluded.updated_at, owner=excluded.owner,
    max_attempts=excluded.max_attempts, not_before=excluded.not_before, reason=excluded.reason,
    attempts=excluded.attempts, heartbeat=excluded.heartbeat, started_at=excluded.started_at,
    run_time=excluded.run_time, waiting=excluded.waiting, gang=excluded.gang
WHERE executions.generation = excluded.generation AND executions.state < {FINISHED}
    AND (executions.state = {CREATED} OR executions.owner = %s)
RETURNING execution_id
"""

# New executions this replica dispatches at once (never pending), and their dispatches' log rows:
# one statement, so one round trip and its own transaction.
_INSERT = f"""
WITH inserted AS (
    INSERT INTO executions ({COLUMNS}) {FROM_JSON} RETURNING execution_id, generation, worker, updated_at
)
INSERT INTO dispatches SELECT execution_id, generation, worker, %s, updated_at FROM inserted
"""

# The SCHEDULED row as cycle/placing.py's ``scheduled_row`` builds it, one generation on from the
# row as stored: a replica's mirror of a pending row does not know its generation.
_CLAIM = f"""
WITH wanted AS (
    SELECT * FROM unnest(%(ids)s::text[], %(workers)s::text[], %(gpus)s::text[], %(gangs)s::text[])
        AS w(execution_id, worker, gpus, gang)
), picked AS (
    SELECT e.execution_id, w.worker, w.gpus, w.gang FROM executions e JOIN wanted w USING (execution_id)
    WHERE e.state = {CREATED} AND e.not_before <= %(now)s AND e.waiting = 0 ORDER BY e.execution_id FOR UPDATE OF e SKIP LOCKED
), claimed AS (
    UPDATE executions e SET state = {SCHEDULED}, worker = p.worker, gpu_indices = p.gpus, owner = %(owner)s,
        generation = e.generation + 1, updated_at = %(now)s, gang = p.gang
    FROM picked p WHERE e.execution_id = p.execution_id
    RETURNING {", ".join("e." + c.strip() for c in COLUMNS.split(","))}
), logged AS (
    INSERT INTO dispatches SELECT execution_id, generation, worker, %(owner)s, %(now)s FROM claimed
)
SELECT * FROM claimed
"""

# Claims and claim marks (RUNNING) commit without waiting for the WAL flush. If
# PostgreSQL itself crashes, such a commit can be lost, which is as if it never
# happened: the row is still pending, or still SCHEDULED, and the worker's result
# is refused by generation or redispatched, which at-least-once execution allows.
# Submissions, requeues and results always wait for the flush: they are promises.
_RELAXED = "SET LOCAL synchronous_commit = off"


@dataclass(slots=True)
class _Claim:
    dispatches: list[Execution]
    now: float
    future: asyncio.Future[dict[str, Execution]]


class Writer:
    def __init__(self, url: str, replica_id: str):
        self.url = url
        self.replica_id = replica_id
        # Set while tenants have terms: each claim then admits only what quotas allow cluster-wide.
        self.quota_guard: QuotaGuard | None = None
        # Set on replicas: each claim of limited work admits only what the limits allow cluster-wide.
        self.flow_guard: FlowGuard | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._claims: list[_Claim] = []
        self._riding: list[_Claim] = []  # claims for the next batch of rows' own transaction
        self._inserts: list[tuple[Execution, asyncio.Future[None]]] = []
        self._commits = GroupCommit(self._write, then=self)

    async def connect(self) -> None:
        self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)

    async def drain(self) -> None:
        """Wait until what is queued (rows and claims) is written."""
        await self._commits.drain()

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()

    def save(self, execution: Execution) -> asyncio.Future[None]:
        return self._commits.save(execution)

    def save_many(self, executions: list[Execution]) -> asyncio.Future[None]:
        return self._commits.save_many(executions)

    def claim(
        self, dispatches: list[Execution], with_rows: bool = False
    ) -> asyncio.Future[dict[str, Execution]]:
        """Claim these rows: after the next batch of rows, or, ``with_rows``, in its transaction."""
        future: asyncio.Future[dict[str, Execution]] = asyncio.get_running_loop().create_future()
        claim = _Claim(dispatches, max((e.updated_at for e in dispatches), default=0.0), future)
        (self._riding if with_rows else self._claims).append(claim)
        self._commits.kick()
        return future

    def insert_dispatched(self, execution: Execution) -> asyncio.Future[None]:
        """Queue a new execution already claimed by this replica; resolves once it is committed.

        Submissions that one of this replica's workers takes at once come in bursts: one
        transaction each was a fifth of a replica's main-thread CPU in a burst of single submissions.
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inserts.append((execution, future))
        self._commits.kick()
        return future

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        """The writer, reconnected if the database dropped it (a failed batch has told its callers)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                await self._conn.close()
            self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        return self._conn

    async def _write(self, batch: list[Execution]) -> set[str]:
        """One group commit: upsert every row, claim what rides with them, announce what was
        written and not claimed; return the ids refused."""
        riding, self._riding = self._riding, []  # taken with the batch, before the first await
        try:
            writer = await self._connection()
            async with writer.transaction():
                if all(e.state is State.RUNNING for e in batch) and not riding:
                    await writer.execute(_RELAXED)
                applied: set[str] = set()
                for rows in rows_json([owned_row(e, self.replica_id) for e in batch]):
                    cursor = await writer.execute(_UPSERT, (rows, self.replica_id))
                    applied.update(row[0] for row in await cursor.fetchall())
                claimed = await self._claim_in(writer, riding) if riding else {}
                await announce(
                    writer, [e for e in batch if e.execution_id in applied and e.execution_id not in claimed]
                )
        except BaseException as exc:
            fail((claim.future for claim in riding), exc)
            raise
        _answer(riding, claimed)
        return {e.execution_id for e in batch} - applied

    # New dispatched rows and claims are the group commit's follow-up (group_commit.FollowUp):
    # flushed after each batch of rows.

    @property
    def queued(self) -> bool:
        return bool(self._claims or self._inserts or self._riding)

    async def flush(self) -> None:
        # Riding claims wait for the rows queued with them (saved while a batch was in flight, they
        # are the next batch); with no row queued, nothing will take them: claimed on their own.
        if self._riding and not self._commits.rows_queued:
            self._claims[:0], self._riding = self._riding, []
        if self._inserts:
            await self._insert()
        if self._claims:
            await self._claim()

    async def _insert(self) -> None:
        """Every new dispatched row queued so far, with its dispatch logged, in one durable transaction."""
        inserts, self._inserts = self._inserts, []
        try:
            writer = await self._connection()
            texts = rows_json([owned_row(e, self.replica_id) for e, _ in inserts])
            # Autocommit: one statement is its own transaction; a batch cut in several takes one.
            async with writer.transaction() if len(texts) > 1 else contextlib.nullcontext():
                for rows in texts:
                    await writer.execute(_INSERT, (rows, self.replica_id))
        except BaseException as exc:
            fail((future for _, future in inserts), exc)
            if not isinstance(exc, Exception):
                raise
            return
        for _, future in inserts:
            if not future.done():
                future.set_result(None)

    async def _claim(self) -> None:
        """Every claim queued so far, in one transaction; each caller gets the rows it won."""
        claims, self._claims = self._claims, []
        try:
            writer = await self._connection()
            async with writer.transaction():
                await writer.execute(_RELAXED)
                claimed = await self._claim_in(writer, claims)
        except BaseException as exc:
            fail((claim.future for claim in claims), exc)
            if not isinstance(exc, Exception):
                raise
            return
        _answer(claims, claimed)

    async def _claim_in(
        self, writer: psycopg.AsyncConnection[Any], claims: list[_Claim]
    ) -> dict[str, Execution]:
        """Inside a transaction: claim what ``claims`` want, as the guards admit; the rows won, by id."""
        wanted = [e for claim in claims for e in claim.dispatches]
        if self.quota_guard is not None:
            refused = await guarded(writer, self.replica_id, self.quota_guard, wanted)
            wanted = [e for e in wanted if e.execution_id not in refused]
        if self.flow_guard is not None and wanted:
            refused = await flow_guarded(writer, self.flow_guard, wanted)
            wanted = [e for e in wanted if e.execution_id not in refused]
        ids = [e.execution_id for e in wanted]
        workers = [e.worker for e in wanted]
        gpus = [json.dumps(list(e.gpu_indices)) for e in wanted]
        # A gang's members as placed (its row's gang otherwise stays as stored: "" or pending).
        gangs = [e.gang.to_json() if e.gang is not None else "" for e in wanted]
        cursor = writer.cursor(row_factory=dict_row)
        await cursor.execute(
            _CLAIM,
            {"ids": ids, "workers": workers, "gpus": gpus, "gangs": gangs, "owner": self.replica_id,
             "now": claims[-1].now},
        )  # fmt: skip
        return {row["execution_id"]: execution_from_row(row) for row in await cursor.fetchall()}


def _answer(claims: list[_Claim], claimed: dict[str, Execution]) -> None:
    """Each caller still waiting gets the rows it won, by id."""
    for claim in claims:
        if not claim.future.done():
            claim.future.set_result(
                {
                    e.execution_id: claimed[e.execution_id]
                    for e in claim.dispatches
                    if e.execution_id in claimed
                }
            )
