"""What a reclaim plan is made of, and the checks every plan makes (single executions in
preemption.py, gangs in gang_preemption.py): an execution holding room (``Running``), the plan
(``Preemption``), and whether a preemptor fits a worker and its tenant's quota once its victims
are gone. A module of its own so both planners build on it and neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flux.matching.aging import BookedRoom
from flux.matching.filters import fits_now
from flux.matching.shape import Shape
from flux.matching.tenancy import ZERO, Accounts, Ledger, Vector, sub
from flux.matching.view import Room, WorkerView


@dataclass(frozen=True, slots=True)
class Running:
    """An execution holding room on a worker (scheduled or running)."""

    execution_id: str
    shape: Shape
    worker: str
    gpu_indices: tuple[int, ...] = ()
    priority: int = 0
    # Submission order; the newest (highest) goes first among equal priorities.
    seq: int = 0

    @property
    def tenant(self) -> str:
        return self.shape.tenant


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``victims``; then ``execution_id`` fits ``worker`` and its tenant's quota (a gang: every
    member fits its own worker of ``members``, ``worker`` the first)."""

    execution_id: str
    worker: str
    victims: tuple[Running, ...]
    members: tuple[str, ...] = ()

    def describe(self, viewer: str = "") -> str:
        """``will preempt 2 executions of tenant web``.

        With ``viewer`` (the tenant a non-cluster-admin caller speaks for) no other tenant is
        named: ``will preempt 2 executions of another tenant`` (``of 2 other tenants``). Which
        tenants borrow in a cohort is theirs and the cluster admin's to know.
        """
        by_tenant: dict[str, int] = {}
        for victim in self.victims:
            by_tenant[victim.tenant] = by_tenant.get(victim.tenant, 0) + 1
        parts = [
            f"{_executions(count)} of tenant {name}"
            for name, count in by_tenant.items()
            if not viewer or name == viewer
        ]
        others = {name: count for name, count in by_tenant.items() if viewer and name != viewer}
        if others:
            whose = "another tenant" if len(others) == 1 else f"{len(others)} other tenants"
            parts.append(f"{_executions(sum(others.values()))} of {whose}")
        return "will preempt " + " and ".join(parts)


def _executions(count: int) -> str:
    return f"{count} execution{'s' if count != 1 else ''}"


def _still_borrowing(accounts: Accounts, victim: Running, chosen: list[Running], shape: Shape) -> bool:
    """Whether ``victim``'s tenant, without the victims chosen so far, still uses above its nominal
    quota on a resource both it and ``shape`` ask for: reclaim takes back only what was borrowed."""
    terms = accounts.terms.get(victim.tenant)
    if terms is None:
        return False
    used = _without(accounts.used(victim.tenant), [v for v in chosen if v.tenant == victim.tenant])
    return any(
        terms.nominal[i] is not None
        and used[i] > terms.nominal[i]
        and victim.shape.demand[i]
        and shape.demand[i]
        for i in range(len(ZERO))
    )


def _without(used: Vector, victims: Iterable[Running]) -> Vector:
    for victim in victims:
        used = sub(used, victim.shape.demand)
    return used


def _quota_fits(accounts: Accounts, shape: Shape, victims: list[Running]) -> bool:
    """Whether ``shape`` fits its tenant's quota once ``victims`` are refunded."""
    if not victims:
        return Ledger(accounts).fits(shape.tenant, shape.demand)
    after = accounts.copy()
    for victim in victims:
        after.refund(victim.tenant, victim.shape.demand)
    return Ledger(after).fits(shape.tenant, shape.demand)


def _room_fits(shape: Shape, view: WorkerView, victims: list[Running]) -> bool:
    """Whether ``shape`` fits ``view`` by reservations once the ``victims`` on it are gone."""
    room: Room = BookedRoom(view)
    gone = [v for v in victims if v.worker == view.name]
    for victim in gone:
        r = victim.shape.requests
        room.cpu += r.cpu
        room.memory += r.memory
        room.disk += r.disk
        room.active -= 1
    freed = {index for victim in gone for index in victim.gpu_indices}
    if freed:
        totals = {g.index: g.memory_total for g in view.resources.gpus}
        for index in freed:
            if index in totals and index not in room.gpus:
                room.gpus.append(index)
                room.vram[index] = totals[index]
        room.gpus.sort(key=lambda index: (-room.vram[index], index))
    return fits_now(shape, room)
