"""PostgreSQL store: one database shared by several server replicas.

What SQLite does with one process's memory, this does with the database:

- **Ownership.** A dispatched or running execution belongs to the replica its
  worker is connected to (``owner``). Every write of an owned row is guarded
  (same generation, not finished, still ours), so a replica that lost a row to
  another — its worker moved, it was presumed dead and swept, a client
  cancelled through another replica — learns it from a ``Conflict`` instead of
  overwriting newer state.
- **Claims.** Pending rows are shared. A replica dispatches only after
  ``claim`` moved the row to SCHEDULED under ``SELECT … FOR UPDATE SKIP
  LOCKED``, so two replicas never dispatch the same execution; each claim is
  logged in ``dispatches`` keyed by (execution, generation).
- **Wake-ups.** ``NOTIFY`` tells the other replicas about new pending work,
  cancellations, finished executions, moved workers and new workflows; a
  replica's safety tick rereads the queue in case one was missed.
- **Liveness.** Each replica heartbeats its row in ``replicas``; one live
  replica at a time (``pg_try_advisory_xact_lock``) sweeps the rows of
  replicas silent for longer than the grace period back into the queue.

Writes are batched as in SQLite (flux/store/group_commit.py): saves and claims
made while a transaction is in flight ride the next one, on one writer
connection.

By role: ``store`` (the ``PostgresStore`` class, one-off reads and writes),
``schema`` (tables, migration), ``writer`` (group commits and claims),
``listener`` (notices from the other replicas), ``rows`` (an execution's row
and its announcements), ``cluster`` (heartbeats, the worker directory,
adoption, the sweep), ``quota`` (quotas and preemption across replicas).
"""

from flux.store.postgres.rows import redacted
from flux.store.postgres.store import PostgresStore

__all__ = ["PostgresStore", "redacted"]
