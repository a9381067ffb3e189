"""Reclaim for a pending gang: victims on enough workers that every member fits at once.

A single execution reclaims room on one worker (``flux.matching.preemption``); a gang needs room
on ``size`` distinct workers at the same time, all inside one ``same`` group and each on its own
``spread`` value. So its plan is made for the whole gang or not at all: a plan is returned only
when, with all of its victims gone, every member fits its worker (by reservations, as aging
judges a nominee) and the gang's whole demand fits its tenant's quota. Preempting for a gang that
would still not fit is exactly the waste reclaim exists to avoid (volcano-sh/volcano#3373).

The victims are those a single execution of the same tenant could take: executions of other
tenants of its cohort that borrow a resource the gang asks for (``_still_borrowing``), lowest
priority first, then newest. A running gang among them is a victim whole: stopping it frees room
on each of its members' workers, and its demand is refunded once.

Per group (one ``same`` value, or the whole fleet): each capable worker's cost alone (the victims
the greedy would stop there; none where a member fits already); the cheapest ``size`` workers (one
per ``spread`` value) are filled in that order, each with the victims chosen before it counted as
gone; then victims anywhere until the quota fits; then every victim whose removal still leaves
every member and the quota fitting is dropped, so each one is needed. Among groups the plan with
fewest victims wins, then the least important victims, then the group's value. When some group
takes the whole gang without a victim, nothing is planned: placing it is the scheduler's job.

Cost: O(workers × victims on each) per group, once per pending gang and planning step.
"""

from __future__ import annotations

from collections.abc import Sequence

from flux.matching.preemption_room import Preemption, Running, _quota_fits, _room_fits, _still_borrowing
from flux.matching.shape import Shape
from flux.matching.tenancy import Accounts
from flux.matching.view import WorkerView

_Plan = tuple[list[str], list[str]]  # (victim execution ids, member workers)


class _Victims:
    """The eligible victims by execution (a gang's every member) and by worker, in victim order."""

    def __init__(self, eligible: Sequence[Running]):
        self.order: list[str] = []
        self.members: dict[str, list[Running]] = {}
        self.on: dict[str, list[str]] = {}
        for running in eligible:
            if running.execution_id not in self.members:
                self.order.append(running.execution_id)
                self.members[running.execution_id] = []
            self.members[running.execution_id].append(running)
        for execution_id in self.order:
            for running in self.members[execution_id]:
                listed = self.on.setdefault(running.worker, [])
                if execution_id not in listed:
                    listed.append(execution_id)

    def units(self, ids: Sequence[str]) -> list[Running]:
        """One per victim execution: what the quota checks refund (a gang's demand is its whole)."""
        return [self.members[i][0] for i in ids]

    def freed(self, ids: Sequence[str]) -> list[Running]:
        """Every member of each victim: the room each frees on its worker."""
        return [running for i in ids for running in self.members[i]]

    def importance(self, ids: Sequence[str]) -> tuple[tuple[int, int], ...]:
        return tuple(sorted((r.priority, -r.seq) for r in self.units(ids)))


def plan_gang(
    accounts: Accounts,
    execution_id: str,
    shape: Shape,
    views: Sequence[WorkerView],
    eligible: Sequence[Running],
) -> Preemption | None:
    """The smallest victim set that lets every member of the gang ``shape`` run at once, or None.

    ``views`` are the capable, unpaused workers; ``eligible`` the victims a single execution of
    ``shape``'s tenant could take (``flux.matching.preemption.plan`` filters both)."""
    victims = _Victims(eligible)
    best: tuple[tuple[int, tuple[tuple[int, int], ...], str], _Plan] | None = None
    for value, group in sorted(_groups(shape, views).items()):
        found = _plan_group(accounts, shape, group, victims)
        if found is None:
            continue
        if not found[0]:
            return None  # the gang fits this group now: placing it is the scheduler's job
        rank = (len(found[0]), victims.importance(found[0]), value)
        if best is None or rank < best[0]:
            best = (rank, found)
    if best is None:
        return None
    ids, members = best[1]
    return Preemption(execution_id, members[0], tuple(victims.units(ids)), tuple(members))


def _groups(shape: Shape, views: Sequence[WorkerView]) -> dict[str, list[WorkerView]]:
    """The workers a gang may use together: one list per value of its ``same`` label (or one list);
    with ``spread``, only workers that have that label."""
    gang = shape.gang
    assert gang is not None
    groups: dict[str, list[WorkerView]] = {}
    for view in views:
        value = view.labels.get(gang.same) if gang.same else ""
        if value is None or (gang.spread and gang.spread not in view.labels):
            continue
        groups.setdefault(value, []).append(view)
    return groups


def _plan_group(accounts: Accounts, shape: Shape, group: list[WorkerView], victims: _Victims) -> _Plan | None:
    gang = shape.gang
    assert gang is not None
    if len(group) < gang.size:
        return None
    alone = []
    for view in group:
        cost = _fill(accounts, shape, view, [], victims)
        if cost is not None:
            alone.append((len(cost), victims.importance(cost), view.name, view))
    alone.sort(key=lambda entry: entry[:3])
    chosen: list[str] = []
    members: list[WorkerView] = []
    spread_values: set[str] = set()
    for _, _, _, view in alone:
        if len(members) == gang.size:
            break
        spread = view.labels[gang.spread] if gang.spread else ""
        if spread in spread_values:
            continue
        more = _fill(accounts, shape, view, chosen, victims)
        if more is None:
            continue  # its victims were needed as borrowed work no more once the others are gone
        chosen.extend(more)
        members.append(view)
        if gang.spread:
            spread_values.add(spread)
    if len(members) < gang.size:
        return None
    for execution_id in victims.order:
        if _quota_fits(accounts, shape, victims.units(chosen)):
            break
        if execution_id not in chosen and _still_borrowing(
            accounts, victims.members[execution_id][0], victims.units(chosen), shape
        ):
            chosen.append(execution_id)
    if not _whole_fits(accounts, shape, members, chosen, victims):
        return None
    for execution_id in reversed(list(chosen)):
        rest = [i for i in chosen if i != execution_id]
        if _whole_fits(accounts, shape, members, rest, victims):
            chosen = rest
    return chosen, [view.name for view in members]


def _fill(
    accounts: Accounts, shape: Shape, view: WorkerView, chosen: list[str], victims: _Victims
) -> list[str] | None:
    """The further victims on ``view`` (beyond ``chosen``) until one member fits there, or None."""
    more: list[str] = []
    for execution_id in victims.on.get(view.name, ()):
        if _room_fits(shape, view, victims.freed(chosen + more)):
            return more
        if execution_id in chosen or execution_id in more:
            continue
        if _still_borrowing(accounts, victims.members[execution_id][0], victims.units(chosen + more), shape):
            more.append(execution_id)
    return more if _room_fits(shape, view, victims.freed(chosen + more)) else None


def _whole_fits(
    accounts: Accounts, shape: Shape, members: list[WorkerView], ids: list[str], victims: _Victims
) -> bool:
    """Whether, with ``ids`` gone, every member fits its worker and the gang fits its tenant's quota."""
    freed = victims.freed(ids)
    return all(_room_fits(shape, view, freed) for view in members) and _quota_fits(
        accounts, shape, victims.units(ids)
    )
