"""Flow control across replicas: each claim of limited work counts the whole cluster's use.

Every replica admits work through its own budgets (flux/dispatcher/state/flow.py), which see
only what it placed itself. The claim transaction is where a concurrency limit is made exact
cluster-wide, as quota.py does for tenants' quotas: when a claim wants rows with flow keys, it
takes ``FLOW_LOCK`` (a transaction-scoped advisory lock), reads every limited row held now (the
SCHEDULED and RUNNING rows with flow keys) and claims only what the flow guard admits. The lock
is held until the claim commits, so the next claim of limited work (any replica's) counts this
one's rows: two replicas can never both take a key's last slot.

Nothing is charged or given back by hand: use is recounted from the executions table at each
claim, so a finish, a cancel, a requeue or a replica killed mid-run frees its slot by the row's
own state change, with no count to drift. The cost is one read of the limited rows held (an
index on state) per claim of limited work; claims of unlimited work skip it.

A rate is a token bucket, and a bucket cannot be recounted from rows: its tokens are stored, in
``flow_buckets`` (one row per rate budget: a workflow's or a named limit's, per key), read and
written under the same lock in the claim's transaction. The guard refills each from its
``updated_at`` to the database's clock (one clock for every replica, whatever theirs say), takes
a token per row it admits and refuses a row whose bucket is dry. A missing row is a full bucket,
so a budget nothing used for long costs nothing. Each row also says when it is full again if no
token is taken (``full_at``, from the rate and burst the guard knew when it took the last one):
from then on the row says no more than a missing one, and ``prune_buckets`` deletes it, so the
rows of keys gone quiet do not pile up. (A rate lowered live after that refills a pruned key a
little early: at most one burst, once.)
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from flux.domain.execution import Execution
from flux.store.rows import RUNNING, SCHEDULED
from flux.store.shared import Bucket, FlowGuard, FlowRow

# "FLUX" + 5; see QUOTA_LOCK (quota.py), always taken before this one.
FLOW_LOCK = 0x464C555D

_COLUMNS = "execution_id, tenant, workflow_name, workflow_version, flow_keys"
_WANTED = f"SELECT {_COLUMNS} FROM executions WHERE execution_id = ANY(%s) AND flow_keys <> ''"
_HELD = f"SELECT {_COLUMNS} FROM executions WHERE state IN ({SCHEDULED}, {RUNNING}) AND flow_keys <> ''"


async def rows(db: psycopg.AsyncConnection[Any], sql: str, params: tuple[Any, ...] = ()) -> list[FlowRow]:
    cursor = await db.execute(sql, params)
    return [
        FlowRow(execution_id, tenant, name, int(version), tuple(sorted(json.loads(keys).items())))
        for execution_id, tenant, name, version, keys in await cursor.fetchall()
    ]


async def held(db: psycopg.AsyncConnection[Any]) -> list[FlowRow]:
    """Every limited row a worker holds now, whichever replica's (``flux limit show``)."""
    return await rows(db, _HELD)


async def guarded(db: psycopg.AsyncConnection[Any], guard: FlowGuard, wanted: list[Execution]) -> set[str]:
    """Inside the claim's transaction: the ids of ``wanted`` the flow guard refuses (none unlimited).

    The flow keys are read from the rows: a replica's mirror of a pending row does not carry them."""
    limited = await rows(db, _WANTED, ([e.execution_id for e in wanted],))
    if not limited:
        return set()
    await db.execute("SELECT pg_advisory_xact_lock(%s)", (FLOW_LOCK,))
    order = {e.execution_id: index for index, e in enumerate(wanted)}
    limited.sort(key=lambda row: order[row.execution_id])
    buckets, now = await _buckets(db, sorted(guard.rates(limited)))
    refused = guard(await held(db), limited, buckets, now)
    if buckets:
        names = sorted(buckets)
        await db.execute(
            _WRITE_BUCKETS,
            (names, [name.split("/")[1] for name in names], [buckets[n].tokens for n in names],
             [buckets[n].updated_at for n in names], [buckets[n].full_at for n in names]),
        )  # fmt: skip
    return refused


# Every budget asked for, its row if it has one, and the database's clock.
_READ_BUCKETS = """
SELECT b.budget, f.tokens, f.updated_at, extract(epoch FROM clock_timestamp())::float8
FROM unnest(%s::text[]) AS b(budget) LEFT JOIN flow_buckets f USING (budget)
"""
_WRITE_BUCKETS = """
INSERT INTO flow_buckets (budget, tenant, tokens, updated_at, full_at)
SELECT * FROM unnest(%s::text[], %s::text[], %s::float8[], %s::float8[], %s::float8[])
ON CONFLICT (budget) DO UPDATE
SET tokens = excluded.tokens, updated_at = excluded.updated_at, full_at = excluded.full_at
"""
# Under FLOW_LOCK, tried not waited for: a claim busy with the buckets goes first, and the rows
# wait for the next round.
_PRUNE_BUCKETS = "DELETE FROM flow_buckets WHERE full_at <= extract(epoch FROM clock_timestamp())"


async def prune_buckets(db: psycopg.AsyncConnection[Any]) -> int:
    """Inside a transaction: delete the buckets full again by now; 0 when a claim holds the lock."""
    locked = await (await db.execute("SELECT pg_try_advisory_xact_lock(%s)", (FLOW_LOCK,))).fetchone()
    if not locked or not locked[0]:
        return 0
    return max((await db.execute(_PRUNE_BUCKETS)).rowcount, 0)


async def _buckets(db: psycopg.AsyncConnection[Any], names: list[str]) -> tuple[dict[str, Bucket], float]:
    """The stored buckets of ``names`` (a missing one is left to the guard: full) and the time."""
    if not names:
        return {}, 0.0  # concurrency only: no clock needed
    cursor = await db.execute(_READ_BUCKETS, (names,))
    found = await cursor.fetchall()
    buckets = {
        budget: Bucket(float(tokens), float(at)) for budget, tokens, at, _ in found if tokens is not None
    }
    return buckets, float(found[0][3])
