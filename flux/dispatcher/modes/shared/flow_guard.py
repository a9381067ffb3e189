"""Flow control across replicas: the claim admits limited work only while the cluster has room.

Each replica admits work through its own budgets (state/flow.py), which count only what it
placed; a replica's mirror of another's pending row does not even know its keys. So the claim
decides: the store reads every limited row held now (SCHEDULED or RUNNING, whichever replica's)
under a lock and asks ``FlowGuard`` which of the claim's rows would take a key past its
``max`` (flux/store/postgres/flow.py). A refused row is let go here (LOST: unreserved and
forgotten), not put back in line, which would place and refuse it again at once; it comes back
when a slot frees somewhere: a finish, a cancel or a requeue announced by any replica makes the
feed reread the pending rows (``retry``), and the safety tick rereads them anyway.

Only concurrency is made exact cluster-wide; a rate budget stays each replica's own (see the
flow-control guide).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from flux.dispatcher.state.flow import gates_for
from flux.store import FlowRow

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle


class ClusterFlow:
    def __init__(self) -> None:
        # Refused by the last claims, until the binder has answered for them.
        self.refused: set[str] = set()
        # Some claim was refused since the last retry: a freed slot should reread the pending rows.
        self.waiting = False
        self.d: Handle | None = None

    def attach(self, d: Handle) -> None:
        self.d = d

    def __call__(self, held: list[FlowRow], wanted: list[FlowRow]) -> set[str]:
        """The ids of ``wanted`` (in placement order) that would take a key past its max."""
        in_use = self.in_use(held)
        refused: set[str] = set()
        for row in wanted:
            slots = self.slots(row)
            if any(in_use[budget] >= most for budget, most in slots):
                refused.add(row.execution_id)
            else:
                in_use.update(budget for budget, _ in slots)
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
        assert self.d is not None
        record = self.d.catalogue.get(row.workflow_name, row.workflow_version)
        if record is None:
            return []
        gates = gates_for(record, row.tenant, dict(row.flow_keys), self.d.flow.named)
        return [(g.budget, g.max) for g in gates if g.max is not None]
