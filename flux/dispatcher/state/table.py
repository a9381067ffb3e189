"""The execution table: what the dispatcher knows of each execution, and the one way it is saved.

One commit rule: a final state is visible only once it is committed. Until then
callers (get, watch, listings) see the state before it, kept in ``committing``;
``committed`` then shows the final state and tells the watchers, so nobody sees
a result that a crash could undo.

One save path for the executions it holds: ``save`` queues a row and handles
the outcome the same way for every caller. (A new submission is written before
the table holds it, by the store directly: its caller waits for that commit and
nothing is queued until it lands; see ``LocalBinder.submit``, ``submission.store_and_queue``
and the shared binder's claimed insert.) A ``Conflict`` (only a shared store reports them: another replica
changed the row) makes the dispatcher drop what it holds of the execution. Any
other failure (the database away) runs the caller's ``failed``, or, when the
caller gave none, marks the execution unsaved: the housekeeping tick writes its
current state again (``save_unsaved``) until a write lands. So no effect lives
only in memory, and a final state whose commit failed is shown as soon as it is
stored, not at the next restart, even if its worker never retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator

from flux.dispatcher.state.settings import Settings
from flux.dispatcher.state.unfinished import Unfinished
from flux.dispatcher.state.watchers import Watchers
from flux.domain.execution import Execution, result_bytes, utf8_bytes
from flux.domain.tenant import DEFAULT_TENANT, Tenant, pending_floor, pending_share
from flux.errors import FailedPrecondition, ResourceExhausted, Unavailable
from flux.store import Conflict, Store

log = logging.getLogger("flux.dispatcher")

# The least room for executions any tenant without its own max_pending is promised (or 1/16
# of --max-pending, when that is less): what a lone tenant leaves for one that arrives.
PENDING_FLOOR = 100


class ExecutionTable:
    def __init__(
        self,
        store: Store,
        watchers: Watchers,
        settings: Settings,
    ):
        self.store = store
        self.watchers = watchers
        # Read at each use: inline_input_bytes, finished_cache, finished_cache_bytes.
        self.settings = settings
        # Unfinished executions, live state (a dispatch is here before any store has it).
        self.unfinished = Unfinished()
        # Batches admitted whose commit is in flight (bulk submission): counted against the limits too.
        self.storing_count = 0
        self.storing_bytes = 0
        self.storing_by_tenant: dict[str, tuple[int, int]] = {}
        # Finished in memory, final state not committed yet: callers still see this (previous) state.
        self.committing: dict[str, Execution] = {}
        # Recent final states for quick answers, within a count and a payload byte budget.
        self.finished: OrderedDict[str, Execution] = OrderedDict()
        self.finished_bytes = 0
        # Executions whose latest write failed, and final states among them (not shown until stored).
        self.unsaved: set[str] = set()
        self.uncommitted: dict[str, Execution] = {}
        # Queued before any row of theirs was written (``submission.submit(written_later=True)``):
        # their callers know nothing of them yet. Each leaves with its first committed write.
        self.unwritten: set[str] = set()
        # Set by the dispatcher: drop what is held of an execution another replica changed.
        self.on_conflict: Callable[[str], None] = lambda execution_id: None
        # Set by the dispatcher: a final state decided (its row is saved next, in the same loop
        # step): dependents waiting for it are released or ended in that same commit.
        self.on_finish: Callable[[Execution], None] = lambda final: None

    # ----------------------------------------------------------------- reads

    def forget_finished_of_tenants_not_in(self, tenants: set[str]) -> None:
        """Drop remembered final states of tenants that no longer exist: the store has moved them
        to the deleted tenant's tombstone, and a tenant created again under the name must not see
        them here (flux.dispatcher.state.tenants)."""
        for execution_id, execution in list(self.finished.items()):
            if execution.tenant not in tenants:
                del self.finished[execution_id]
                self.finished_bytes -= _payload_bytes(execution)

    def __len__(self) -> int:
        return len(self.unfinished)

    def __contains__(self, execution_id: str) -> bool:
        return execution_id in self.unfinished

    def get(self, execution_id: str) -> Execution | None:
        """The live state of an unfinished execution."""
        return self.unfinished.get(execution_id)

    def generation_of(self, execution_id: str) -> int:
        """The current generation of an unfinished execution; 0 if it is not here."""
        execution = self.unfinished.get(execution_id)
        return execution.generation if execution is not None else 0

    def values(self) -> Iterator[Execution]:
        return iter(self.unfinished.values())

    def current(self, execution_id: str) -> Execution | None:
        """The latest committed-or-live state known in memory (a final state shows once committed)."""
        return (
            self.committing.get(execution_id)
            or self.unfinished.get(execution_id)
            or self.finished.get(execution_id)
        )

    def admit(self, size: int, tenant: str = DEFAULT_TENANT, terms: Tenant | None = None) -> None:
        """Refuse new work past the pending limits, naming the limit (the store and RAM stay bounded):
        ``tenant``'s own first (``terms``' max_pending, or its fair share of the server's), then the
        server's. ``terms`` None: the server has no tenant but ``default``, so only the server's
        limits apply (there is no other tenant to lock out)."""
        self.admit_many(1, size, tenant, terms)

    def admit_many(
        self, count: int, size: int, tenant: str = DEFAULT_TENANT, terms: Tenant | None = None
    ) -> None:
        """Refuse a batch of ``count`` executions (``size`` input bytes) unless all of it fits the limits."""
        if terms is not None:
            self._admit_tenant(count, size, tenant, terms)
        s = self.settings
        held = len(self.unfinished) + self.storing_count
        if count == 1 and held >= s.max_pending:
            raise ResourceExhausted(
                f"{held} executions are unfinished; the limit is {s.max_pending} "
                "(--max-pending); retry when some have finished"
            )
        if held + count > s.max_pending:
            raise ResourceExhausted(
                f"{held} executions are unfinished; these {count} would pass the limit of "
                f"{s.max_pending} (--max-pending); send fewer, or retry when some have finished"
            )
        held_bytes = self.unfinished.input_bytes + self.storing_bytes
        if held_bytes + size > s.max_pending_bytes:
            inputs = "this input" if count == 1 else f"these {count} inputs"
            raise ResourceExhausted(
                f"unfinished executions hold {held_bytes} input bytes; {inputs} of "
                f"{size} bytes would pass the limit of {s.max_pending_bytes} (--max-pending-bytes)"
            )

    def _admit_tenant(self, count: int, size: int, tenant: str, terms: Tenant) -> None:
        """``tenant``'s own limits: so that one tenant's backlog cannot fill the server's room and
        lock the others out of submitting (``flux.domain.tenant.pending_share`` says the default)."""
        s = self.settings
        storing_count, storing_bytes = self.storing_by_tenant.get(tenant, (0, 0))
        held = self.unfinished.count_of(tenant) + storing_count
        held_bytes = self.unfinished.bytes_of(tenant) + storing_bytes
        waiting = len(self.unfinished.tenants() | set(self.storing_by_tenant) | {tenant})
        limit = terms.max_pending
        if limit is None:
            limit = pending_share(s.max_pending, waiting, pending_floor(s.max_pending, PENDING_FLOOR))
            how = (
                f"its share of the server's --max-pending {s.max_pending} with {waiting} "
                f"tenant{'s' if waiting != 1 else ''} waiting"
            )
        else:
            how = "its max_pending"
        if held + count > limit:
            these = "" if count == 1 else f"; these {count} would pass it"
            raise ResourceExhausted(
                f"tenant {tenant} has {held} unfinished executions; its limit is {limit}{these} ({how}; "
                f"flux tenant set {tenant} --max-pending N); retry when some have finished"
            )
        limit = terms.max_pending_bytes
        if limit is None:
            limit = pending_share(
                s.max_pending_bytes, waiting, pending_floor(s.max_pending_bytes, s.max_pending_bytes)
            )
            how = (
                f"its share of the server's --max-pending-bytes {s.max_pending_bytes} with {waiting} "
                f"tenant{'s' if waiting != 1 else ''} waiting"
            )
        else:
            how = "its max_pending_bytes"
        if held_bytes + size > limit:
            inputs = "this input" if count == 1 else f"these {count} inputs"
            raise ResourceExhausted(
                f"tenant {tenant}'s unfinished executions hold {held_bytes} input bytes; {inputs} of {size} "
                f"bytes would pass its limit of {limit} ({how}; flux tenant set {tenant} --max-pending-bytes Q)"
            )

    @contextlib.contextmanager
    def storing(
        self, count: int, size: int, tenant: str = DEFAULT_TENANT, terms: Tenant | None = None
    ) -> Iterator[None]:
        """Admit a batch as a whole, and count it against the limits while its commit is in flight.

        A batch waits for its commit before it is held in ``unfinished``: without this,
        two large batches admitted side by side could together pass the limits.
        """
        self.admit_many(count, size, tenant, terms)
        self.storing_count += count
        self.storing_bytes += size
        before = self.storing_by_tenant.get(tenant, (0, 0))
        self.storing_by_tenant[tenant] = (before[0] + count, before[1] + size)
        try:
            yield
        finally:
            self.storing_count -= count
            self.storing_bytes -= size
            left = self.storing_by_tenant.pop(tenant)
            left = (left[0] - count, left[1] - size)
            if left[0]:
                self.storing_by_tenant[tenant] = left

    # ----------------------------------------------------------------- changes

    def add(self, execution: Execution) -> Execution:
        """Hold a stored execution; a large input stays only in the store."""
        return self.unfinished.add(execution, self.settings.inline_input_bytes)

    def update(self, execution: Execution) -> None:
        """A new live state of an unfinished execution; watchers hear of it at once."""
        self.unfinished[execution.execution_id] = execution
        self.watchers.notify(execution)

    def set(self, execution: Execution) -> None:
        """Replace the live state without telling watchers (nothing they need to see changed)."""
        self.unfinished[execution.execution_id] = execution

    def drop(self, execution_id: str) -> Execution | None:
        """Stop holding an unfinished execution (another replica has it, or it was never ours)."""
        self.unsaved.discard(execution_id)
        self.unwritten.discard(execution_id)
        self.uncommitted.pop(execution_id, None)
        self.committing.pop(execution_id, None)
        return self.unfinished.pop(execution_id, None)

    def finish(self, final: Execution) -> None:
        """Out of the unfinished table now; shown as final only once ``committed``."""
        previous = self.unfinished.pop(final.execution_id, None)
        if previous is not None:
            self.committing[final.execution_id] = previous
        self.remember(final)
        self.on_finish(final)

    def committed(self, final: Execution) -> None:
        self.committing.pop(final.execution_id, None)
        self.uncommitted.pop(final.execution_id, None)
        self.watchers.notify(final)

    def remember(self, final: Execution) -> None:
        """Keep a final state for quick answers, dropping the oldest past the count or byte budget."""
        previous = self.finished.pop(final.execution_id, None)
        if previous is not None:
            self.finished_bytes -= _payload_bytes(previous)
        self.finished[final.execution_id] = final
        self.finished_bytes += _payload_bytes(final)
        s = self.settings
        while self.finished and (
            len(self.finished) > s.finished_cache or self.finished_bytes > s.finished_cache_bytes
        ):
            _, dropped = self.finished.popitem(last=False)
            self.finished_bytes -= _payload_bytes(dropped)

    # ----------------------------------------------------------------- saving

    def save(
        self,
        execution: Execution,
        done: Callable[[], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
    ) -> asyncio.Future[None]:
        """Write ``execution`` in the next batch; ``done`` runs once it is committed.

        Returns the write, for a caller that must wait for it (its outcome is handled here). Wait
        through ``asyncio.shield``: a cancelled wait would cancel the write's future, and ``done``
        would never run.
        """
        if execution.state.finished and done is None:
            done = lambda: self.committed(execution)  # noqa: E731 - the commit rule for a final state
        written = self.store.save(execution)
        written.add_done_callback(lambda future: self._saved(execution, future, done, failed))
        return written

    def save_finals(self, finals: list[Execution]) -> asyncio.Future[None]:
        """``save`` for many final states (a batch's cancelled members; one server, which sees no
        conflicts): one write and one callback for them all, each committed as ``save`` commits it."""
        written = self.store.save_many(finals)

        def landed(future: asyncio.Future[None]) -> None:
            if future.cancelled():
                return
            exc = future.exception()
            if exc is not None:
                log.warning(
                    "store write of %d final states failed (%s); writing them again", len(finals), exc
                )
            for final in finals:
                if exc is None:
                    self.unsaved.discard(final.execution_id)
                    self.unwritten.discard(final.execution_id)
                    self.committed(final)
                else:
                    self._unsaved(final)

        written.add_done_callback(landed)
        return written

    def _saved(
        self,
        execution: Execution,
        future: asyncio.Future[None],
        done: Callable[[], None] | None,
        failed: Callable[[BaseException], None] | None,
    ) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if isinstance(exc, Conflict):
            self.on_conflict(exc.execution_id)
        elif exc is not None:
            if failed is not None:
                log.warning("store write of %s failed: %s", execution.execution_id, exc)
                failed(exc)
            else:
                if execution.execution_id not in self.unsaved:  # once per outage, not per retry
                    log.warning(
                        "store write of %s failed (%s); writing it again", execution.execution_id, exc
                    )
                self._unsaved(execution)
        else:
            self.unsaved.discard(execution.execution_id)
            self.unwritten.discard(execution.execution_id)
            if done is not None:
                done()

    def _unsaved(self, execution: Execution) -> None:
        self.unsaved.add(execution.execution_id)
        if execution.state.finished:
            self.uncommitted[execution.execution_id] = execution

    def save_unsaved(self) -> int:
        """Write again the current state of every execution whose last write failed; how many."""
        again = 0
        for execution_id in list(self.unsaved):
            current = self.uncommitted.get(execution_id) or self.unfinished.get(execution_id)
            if current is None:  # finished and stored meanwhile (a retried Complete)
                self.unsaved.discard(execution_id)
                continue
            self.save(current)  # stays unsaved until this write lands
            again += 1
        return again

    async def commit_final(self, final: Execution, written: asyncio.Future[None] | None = None) -> None:
        """Commit a final state and wait for it, then show it (the answer to a client or worker waits too).
        ``written``: its write (``save``), when the caller started it already.

        The worker forgets the result once we answer, so a failed commit reaches it
        as Unavailable: it retries, and the retry stores the recorded result again.
        The showing hangs on the write (``save``), so a caller that goes away meanwhile
        (its stream cut) does not leave the final state stored and never shown.
        """
        try:
            await asyncio.shield(self.save(final) if written is None else written)
        except Conflict:
            raise FailedPrecondition(
                f"execution {final.execution_id} was cancelled or reassigned meanwhile; this result is not recorded"
            ) from None
        except Exception as exc:
            raise Unavailable(f"could not store the result of {final.execution_id}: {exc}") from exc


def _payload_bytes(execution: Execution) -> int:
    return utf8_bytes(execution.input_json) + result_bytes(execution.output_json, execution.error)
