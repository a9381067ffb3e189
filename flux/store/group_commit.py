"""Group commit: the execution rows saved while one transaction is in flight share the next one.

Both stores batch ``save`` through this: it queues the execution's full row and
returns a future; one flush at a time hands the queued rows to the store's
``write`` (one transaction), and every save made meanwhile waits for the next
batch. Rows are whole records, so the latest row of an execution wins within a
batch: it says everything the earlier ones did.

SQLite and PostgreSQL each had a copy of this, and where they differed this keeps:

- **One future per caller** (``Store.save``): a caller that goes away cancels
  its own wait, never the write nor anyone else's wait in the batch. A future
  shared by a batch did: cancelling it cancelled every wait (a worker dying
  mid-commit left other clients' submissions unanswered). PostgreSQL shared one
  future per execution behind a shield for each caller; a fresh future per save
  isolates callers as well, with no shared future to reason about.
- **A failed batch fails each waiting future with its exception**, and the
  flusher re-raises one that is not an ``Exception`` (cancelled at shutdown, an
  interrupt) after answering everyone, so nobody waits forever and nothing is
  hidden. PostgreSQL turned such a one into a ``RuntimeError`` for its waiters,
  which a server reports as a fault of its own; the write was interrupted, not
  broken, and the waiters are told so.
- **Refused rows.** ``write`` returns the ids of rows the database refused (a
  guarded PostgreSQL upsert found the row changed by another replica); their
  callers get ``Conflict`` and the rest of the batch succeeds. SQLite refuses none.

**Under load a batch gathers before it is written.** When ``GATHER_FROM`` callers or more saved
the rows of as many executions during the last batch (many writers at once), the flusher waits while
writes keep coming: it writes once ``GATHER_GAP_S`` passes with none, or ``GATHER_MOST_S`` after
it began, or once ``GATHER_MOST_ROWS`` rows wait. Left alone, the batches stayed small under
load (three or four rows one by one on PostgreSQL, each paying a transaction's round trips),
because the next commit began the moment the last one ended; gathering is what a database's
``commit_delay`` does (with ``commit_siblings``), only when many writers are seen at once. A
client running one execution at a time writes one execution's rows per batch, and a bulk call is
one caller: neither waits.

PostgreSQL also claims on the same connection: ``then`` is flushed by the same
loop, which alternates between the rows queued and the follow-up work queued,
so neither waits behind more than one batch of the other. Rows and claims
queued together land rows first; a row saved while a batch is in flight may
land after a claim queued meanwhile. The dispatcher relies on no more: it
places a requeued execution only once its row is committed (shared_binder.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, Protocol

from flux.domain.execution import Execution
from flux.store.base import Conflict

__all__ = ["FollowUp", "GroupCommit", "Write", "fail"]

# Writes one batch in one transaction; returns the ids of the rows refused (their callers get
# ``Conflict``). Raising fails every caller in the batch.
Write = Callable[[list[Execution]], Awaitable[Collection[str]]]


class FollowUp(Protocol):
    """Other queued work the flusher runs after each batch of rows, one flush at a time."""

    @property
    def queued(self) -> bool: ...

    async def flush(self) -> None: ...


# A batch gathers when at least this many callers saved as many executions' rows during the last
# one (a client running one at a time writes one execution's rows; a bulk call is one caller) ...
GATHER_FROM = 4
# ... and is written once no write came for this long, ...
GATHER_GAP_S = 0.001
# ... or this long after it began gathering (a write under load waits at most this much more) ...
GATHER_MOST_S = 0.02
# ... or once this many rows wait.
GATHER_MOST_ROWS = 512


class GroupCommit:
    def __init__(self, write: Write, then: FollowUp | None = None):
        self._write = write
        self._then = then
        self._rows: dict[str, Execution] = {}
        # Each caller's ids and future: one id for ``save``, a bulk call's every id for ``save_many``.
        self._waiting: list[tuple[str | tuple[str, ...], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        # Writes queued so far (saves, bulk saves, follow-ups): the gathering watches it move.
        self._kicks = 0

    def save(self, execution: Execution) -> asyncio.Future[None]:
        """Queue the execution's row; the future (this caller's own) resolves once it is committed."""
        self._rows[execution.execution_id] = execution
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((execution.execution_id, waiting))
        self.kick()
        return waiting

    @property
    def rows_queued(self) -> bool:
        """Rows wait for the next batch (not counting the batch being written)."""
        return bool(self._rows)

    def save_many(self, executions: list[Execution]) -> asyncio.Future[None]:
        """``save`` for many rows with one future (a bulk submission: 10,000 futures cost more than
        the rows): it resolves once every row is committed, all in the same batch."""
        rows = self._rows
        for execution in executions:
            rows[execution.execution_id] = execution
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((tuple(e.execution_id for e in executions), waiting))
        self.kick()
        return waiting

    def queued(self, execution_id: str) -> Execution | None:
        """The row waiting for the next batch, if any (not one in the batch being written)."""
        return self._rows.get(execution_id)

    def kick(self) -> None:
        """Start a flush unless one is running: it picks up whatever was queued before it ends."""
        self._kicks += 1
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def drain(self) -> None:
        """Wait for the flush in progress, which writes everything queued so far."""
        if self._flusher is not None:
            # Shielded: a close that is cancelled must not cancel the write it waited for.
            await asyncio.shield(self._flusher)

    async def _flush(self) -> None:
        while self._rows or (self._then is not None and self._then.queued):
            if len(self._rows) >= GATHER_FROM and len(self._waiting) >= GATHER_FROM:  # under load
                try:
                    await self._gather()
                except BaseException as exc:  # interrupted (a shutdown): nobody is left waiting
                    waiting, self._rows, self._waiting = self._waiting, {}, []
                    fail((future for _, future in waiting), exc)
                    raise
            if self._rows:
                await self._commit()
            if self._then is not None and self._then.queued:
                await self._then.flush()

    async def _gather(self) -> None:
        """Let the next batch grow while writes keep coming (the module's docstring says when)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + GATHER_MOST_S
        while len(self._rows) < GATHER_MOST_ROWS:
            seen = self._kicks
            await asyncio.sleep(GATHER_GAP_S)
            if self._kicks == seen or loop.time() >= until:
                return

    async def _commit(self) -> None:
        batch, waiting = list(self._rows.values()), self._waiting
        self._rows, self._waiting = {}, []
        try:
            refused = await self._write(batch)
        except BaseException as exc:
            fail((future for _, future in waiting), exc)
            if not isinstance(exc, Exception):
                raise
            return
        for ids, future in waiting:
            if future.done():  # its caller went away
                continue
            if isinstance(ids, str):
                ids = (ids,)
            conflicting = [execution_id for execution_id in ids if execution_id in refused] if refused else ()
            if conflicting:
                future.set_exception(Conflict(conflicting[0]))
            else:
                future.set_result(None)


def fail(waiting: Iterable[asyncio.Future[Any]], exc: BaseException) -> None:
    """Fail every wait still open with ``exc`` (the caller re-raises one that is not an ``Exception``)."""
    for future in waiting:
        if not future.done():
            future.set_exception(exc)
