"""Quotas across replicas: each claim checks the whole cluster's usage, one claim at a time.

Every replica places from what it holds itself, so its own view of a tenant's
usage misses what the other replicas' workers run. The claim transaction is
where it is made exact: while tenants have terms, a claim first takes
``QUOTA_LOCK`` (a transaction-scoped advisory lock), then reads what every
tenant holds now (the SCHEDULED and RUNNING rows, by tenant and requests), and
claims only the dispatches the quota guard admits. The lock is held until the
claim commits, so the next claim (of any replica) reads usage with this one's
rows in it: two replicas can never both take a tenant's last core.

Preemption is planned by every replica over the pending queue they all mirror,
each with the victims its own workers run; ``preemptions`` lets one of them act
for a pending execution: the replica whose row it is stops its victims. The row
stays while the execution is pending, so no other replica preempts for it once
the first one's victims stopped (its mirror of the queue may not know yet that
the execution was placed); it goes when the execution is no longer pending, or
is taken over once older than the preemption grace (its replica gone).
"""

from __future__ import annotations

from typing import Any

import psycopg

from flux.domain.execution import Execution
from flux.store.base import Held
from flux.store.rows import CREATED, RUNNING, SCHEDULED, requests_from_json
from flux.store.shared import QuotaGuard

# "FLUX" + 4; see the other advisory locks in store.py.
QUOTA_LOCK = 0x464C555C

_HELD = f"""
SELECT e.tenant, w.requests, e.owner = %s, count(*) FROM executions e
JOIN workflows w ON w.name = e.workflow_name AND w.version = e.workflow_version
WHERE e.state IN ({SCHEDULED}, {RUNNING}) GROUP BY 1, 2, 3
"""


async def held(db: psycopg.AsyncConnection[Any], replica_id: str) -> list[Held]:
    """What every tenant holds now, by requests and by whether this replica's workers hold it."""
    cursor = await db.execute(_HELD, (replica_id,))
    return [
        Held(tenant, requests_from_json(requests), bool(mine), int(count))
        for tenant, requests, mine, count in await cursor.fetchall()
    ]


async def guarded(
    db: psycopg.AsyncConnection[Any], replica_id: str, guard: QuotaGuard, wanted: list[Execution]
) -> set[str]:
    """Inside the claim's transaction: lock, read usage, and return what the guard refuses."""
    await db.execute("SELECT pg_advisory_xact_lock(%s)", (QUOTA_LOCK,))
    return guard(await held(db, replica_id), wanted)


async def take_preemption(
    db: psycopg.AsyncConnection[Any], preemptor: str, replica: str, now: float, stale_before: float
) -> bool:
    """Whether ``replica`` may preempt for ``preemptor``: it is still pending (a replica's mirror of
    the queue may lag), and no other replica acts for it (its row is absent, ours, or older than
    ``stale_before``)."""
    cursor = await db.execute(
        "INSERT INTO preemptions SELECT %s, %s, %s WHERE EXISTS "
        f"(SELECT 1 FROM executions WHERE execution_id = %s AND state = {CREATED}) "
        "ON CONFLICT (preemptor) DO UPDATE SET replica = excluded.replica, at = excluded.at "
        "WHERE preemptions.replica = excluded.replica OR preemptions.at < %s RETURNING preemptor",
        (preemptor, replica, now, preemptor, stale_before),
    )
    return await cursor.fetchone() is not None


async def prune_preemptions(db: psycopg.AsyncConnection[Any], stale_before: float) -> None:
    """Forget the rows of executions no longer pending, and rows too old to hold anyone back."""
    await db.execute(
        "DELETE FROM preemptions p WHERE p.at < %s OR NOT EXISTS "
        f"(SELECT 1 FROM executions e WHERE e.execution_id = p.preemptor AND e.state = {CREATED})",
        (stale_before,),
    )
