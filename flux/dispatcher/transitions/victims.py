"""Preemption's victims as the reclaimer sees them: ``Stopping`` (one told to stop and not handed
back yet), the running executions the planner may pick among, whether anyone borrows at all, and
the reason a victim is given. Its own module so that reclaim.py holds the reclaimer's steps alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flux.matching.preemption import Running

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.matching import Shape
    from flux.matching.tenancy import Accounts


@dataclass(frozen=True, slots=True)
class Stopping:
    """A preempted execution its worker has not handed back yet."""

    generation: int
    worker: str
    deadline: float
    # The pending execution it makes room for, and that execution's lane (shape).
    preemptor: str
    lane: Shape


def anyone_borrowing(accounts: Accounts) -> bool:
    """Whether some tenant uses more than its nominal quota of something: else nothing is reclaimable."""
    for name, terms in accounts.terms.items():
        used = accounts.used(name)
        if any(n is not None and used[i] > n for i, n in enumerate(terms.nominal)):
            return True
    return False


def stop_reason(lane: Shape) -> str:
    return f"preempted: tenant {lane.tenant} reclaims its quota"


def candidates(d: Handle, stopping: Mapping[str, Stopping]) -> list[Running]:
    """Every execution holding room here and not already stopping, as the planner sees it."""
    running = []
    for entry in d.registry.values():
        for execution_id, holding in entry.holdings.items():
            execution = d.table.get(execution_id)
            if execution is None or execution_id in stopping:
                continue
            running.append(
                Running(
                    execution_id,
                    d.catalogue.shape_of(execution),
                    entry.name,
                    holding.gpus,
                    execution.priority,
                    execution.seq,
                )
            )
    return running
