"""Flow control across replicas: the claim admits limited work only while the cluster has room.

Each replica admits work through its own budgets (state/flow.py), which count only what it
placed; a replica's mirror of another's pending row does not even know its keys. So the claim
decides: the store reads every limited row held now (SCHEDULED or RUNNING, whichever replica's)
under a lock and asks ``FlowGuard`` which of the claim's rows would take a key past its
``max`` (flux/store/postgres/flow.py). A refused row is let go here (LOST: unreserved and
forgotten), not put back in line, which would place and refuse it again at once; it comes back
when a slot frees somewhere: a finish, a cancel or a requeue announced by any replica makes the
feed reread the pending rows (``retry``), and the safety tick rereads them anyway.

A rate is made cluster-wide the same way, through a token bucket the replicas share (the
store's ``flow_buckets``, read and written under the same lock): a row whose bucket has no token
is refused and let go like the others, but nothing that finishes would bring it back, so the
guard notes when the bucket's next token is due (``due``) and the binder arms a timer then
(``Kind.FLOW``, token ``SHARED``): when it fires the feed rereads the pending rows. Each
replica's own budgets still admit first (so one replica alone never passes the rate either);
the shared bucket is what keeps N replicas from starting N times the rate.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from flux.dispatcher.state.flow import gates_for
from flux.matching.flow import Gate
from flux.store import Bucket, FlowRow

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle


class ClusterFlow:
    def __init__(self) -> None:
        # Refused by the last claims, until the binder has answered for them.
        self.refused: set[str] = set()
        # Some claim was refused since the last retry: a freed slot should reread the pending rows.
        self.waiting = False
        # Rate budgets whose shared bucket refused a row: seconds until their next token (the binder
        # arms a timer and empties it).
        self.due: dict[str, float] = {}
        self.d: Handle | None = None

    def attach(self, d: Handle) -> None:
        self.d = d

    def rates(self, wanted: list[FlowRow]) -> set[str]:
        return {g.budget for row in wanted for g in self.gates(row) if g.max is None}

    def __call__(
        self,
        held: list[FlowRow],
        wanted: list[FlowRow],
        buckets: dict[str, Bucket] | None = None,
        now: float = 0.0,
    ) -> set[str]:
        """The ids of ``wanted`` (in placement order) that would take a key past its max, or find
        their rate's shared bucket dry; takes a token from ``buckets`` for each row admitted."""
        in_use = self.in_use(held)
        shared = buckets if buckets is not None else {}
        refused: set[str] = set()
        for row in wanted:
            gates = self.gates(row)
            slots = [(g.budget, g.max) for g in gates if g.max is not None]
            rates = [g for g in gates if g.max is None] if buckets is not None else []
            full = any(in_use[budget] >= most for budget, most in slots)
            dry = [g for g in rates if _refilled(shared, g, now).tokens < 1.0 - 1e-9]
            if full or dry:
                refused.add(row.execution_id)
                for gate in dry:  # due when a token is: (1 - tokens) / rate from now
                    wait = (1.0 - shared[gate.budget].tokens) / gate.rate
                    self.due[gate.budget] = min(self.due.get(gate.budget, wait), wait)
            else:
                in_use.update(budget for budget, _ in slots)
                for gate in rates:
                    bucket = shared[gate.budget]
                    bucket.tokens -= 1.0
                    _when_full(bucket, gate)
        if refused:
            self.refused |= refused
            self.waiting = True
        return refused

    def in_use(self, held: list[FlowRow]) -> Counter[str]:
        """Every concurrency budget's use over the whole cluster."""
        in_use: Counter[str] = Counter()
        for row in held:
            in_use.update(budget for budget, _ in self.slots(row))
        return in_use

    def slots(self, row: FlowRow) -> list[tuple[str, int]]:
        """(budget, max) of each concurrency budget ``row`` needs; none for a workflow not known here."""
        return [(g.budget, g.max) for g in self.gates(row) if g.max is not None]

    def gates(self, row: FlowRow) -> tuple[Gate, ...]:
        """The budgets ``row`` needs; none for a workflow not known here."""
        assert self.d is not None
        record = self.d.catalogue.get(row.workflow_name, row.workflow_version)
        if record is None:
            return ()
        return gates_for(record, row.tenant, dict(row.flow_keys), self.d.flow.named)


def _refilled(buckets: dict[str, Bucket], gate: Gate, now: float) -> Bucket:
    """``gate``'s shared bucket refilled to ``now`` (added full if the store had none)."""
    bucket = buckets.get(gate.budget)
    if bucket is None:
        bucket = buckets[gate.budget] = Bucket(float(gate.burst), now)
    elif now > bucket.updated_at:
        bucket.tokens = min(float(gate.burst), bucket.tokens + (now - bucket.updated_at) * gate.rate)
        bucket.updated_at = now
    else:  # a limit lowered live: never more than its new burst
        bucket.tokens = min(float(gate.burst), bucket.tokens)
    _when_full(bucket, gate)
    return bucket


def _when_full(bucket: Bucket, gate: Gate) -> None:
    """When ``bucket`` is full again if nothing takes a token: the store prunes its row then."""
    bucket.full_at = bucket.updated_at + max(0.0, gate.burst - bucket.tokens) / gate.rate
