"""Why is this execution pending? Per-worker reasons and a one-line summary.

The summary counts every reason of every worker, not only the first: a user
who sees "2 have only 2 cores" fixes the cores and must not then discover the
missing GPUs and packages one at a time. Reasons are ranked by how many
workers they hold back, ties in worker-name and filter order. The first four
are said in full ("2 have label role=b, not role=training"); every one after
them is still counted, by its kind ("3 more have other labels, 1 more has too
few cores"), so the line stays short on a large, varied fleet and no reason
goes unsaid. This runs only on explain's path; the scheduler keeps stopping at
the first failing filter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flux.matching.aging import Aging, Nomination, format_wait, slack_beside
from flux.matching.filters import fits_beside, rejections
from flux.matching.gang_explain import explain_gang
from flux.matching.queue import PendingQueue
from flux.matching.reasons import Reason, Rejection
from flux.matching.shape import Shape
from flux.matching.tenancy import Accounts, Ledger, QuotaBlock
from flux.matching.view import WorkerView

MAX_SUMMARY_GROUPS = 4

# How the summary counts the reasons beyond the first groups, by kind: (one worker, several).
REST: dict[Reason, tuple[str, str]] = {
    Reason.RUNTIME: ("lacks the runtime", "lack the runtime"),
    Reason.PAUSED: ("is paused", "are paused"),
    Reason.QUEUE: ("has its own queue to start first", "have their own queues to start first"),
    Reason.LABEL: ("has other labels", "have other labels"),
    Reason.CAPACITY: ("is at capacity", "are at capacity"),
    Reason.CPU: ("has too few cores", "have too few cores"),
    Reason.MEMORY: ("has too little memory", "have too little memory"),
    Reason.GPU: ("has too few GPUs", "have too few GPUs"),
    Reason.GPU_MEMORY: ("has too little GPU memory", "have too little GPU memory"),
    Reason.DISK: ("has too little disk", "have too little disk"),
    Reason.PACKAGE: ("lacks a required package", "lack required packages"),
    Reason.RESERVED: ("is reserved for an older execution", "are reserved for older executions"),
}


@dataclass(frozen=True, slots=True)
class Verdict:
    worker: str
    rejections: tuple[Rejection, ...]

    @property
    def fits(self) -> bool:
        return not self.rejections

    @property
    def permanent(self) -> bool:
        return any(r.permanent for r in self.rejections)

    @property
    def primary(self) -> Rejection | None:
        return next((r for r in self.rejections if r.permanent), None) or next(iter(self.rejections), None)


@dataclass(frozen=True, slots=True)
class Explanation:
    summary: str
    verdicts: tuple[Verdict, ...]
    # The worker nominated for this execution by aging, if any.
    nominated: str = ""
    # Its tenant's quota holds it back now (whatever the workers offer).
    quota: QuotaBlock | None = None
    # (1-based place, tenants waiting) in fair-share order, when more than one tenant waits.
    fair_share: tuple[int, int] | None = None
    # A gang's own verdict (``flux.matching.gang_explain``): None for an ordinary execution.
    gang_infeasible: bool | None = None

    @property
    def capable(self) -> int:
        return sum(v.fits for v in self.verdicts)

    @property
    def infeasible(self) -> bool:
        """No connected worker could run it even idle (true also when no worker is connected);
        for a gang, the idle fleet could not hold all its members at once."""
        if self.gang_infeasible is not None:
            return self.gang_infeasible or all(v.permanent for v in self.verdicts)
        return all(v.permanent for v in self.verdicts)


def explain(
    shape: Shape,
    workers: Iterable[WorkerView],
    *,
    execution_id: str = "",
    aging: Aging | None = None,
    now: float = 0.0,
    accounts: Accounts | None = None,
    queue: PendingQueue | None = None,
) -> Explanation:
    """Why ``execution_id`` (of ``shape``) is pending; with ``aging``, nominations count as reasons.

    A worker nominated for another execution rejects this one unless it fits
    beside the nominee (``reserved for <id>, waiting 2m``); this execution's
    own nomination is said in the summary. With ``accounts``, a quota that holds
    it back leads the summary (``tenant ml at its gpu quota 4/4, borrowing 0 of 2
    in cohort research; 3/3 workers can run it``), and with ``queue`` too, its
    tenant's place in fair-share order among the tenants waiting is said.
    """
    found = _explain_workers(shape, workers, execution_id, aging, now)
    if accounts is None:
        return found
    block = Ledger(accounts).blocked(shape.tenant, shape.demand)
    summary = found.summary if block is None else f"{block.describe()}; {found.summary}"
    position = None
    if queue is not None:
        waiting = sorted(
            queue.tenants(), key=lambda entry: (accounts.shares.get(entry[0], 0.0), entry[1].order)
        )
        names = [name for name, _ in waiting]
        if len(names) > 1 and shape.tenant in names:
            position = (names.index(shape.tenant) + 1, len(names))
            share = accounts.shares.get(shape.tenant, 0.0)
            summary += (
                f"; fair share: tenant {shape.tenant} is {ordinal(position[0])} of {position[1]} tenants waiting"
                f" (share {share:.2f})"
            )
    return Explanation(summary, found.verdicts, found.nominated, block, position, found.gang_infeasible)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _explain_workers(
    shape: Shape, workers: Iterable[WorkerView], execution_id: str, aging: Aging | None, now: float
) -> Explanation:
    nominations = aging.by_worker if aging is not None else {}
    verdicts = []
    workers = sorted(workers, key=lambda v: v.name)
    for view in workers:
        found = rejections(shape, view)
        nomination = nominations.get(view.name)
        if nomination is not None and nomination.execution_id != execution_id:
            blocked = _reserved(shape, view, nomination, now)
            if blocked is not None:
                found.append(blocked)
        verdicts.append(Verdict(view.name, tuple(found)))
    summary = summarize(tuple(verdicts))
    own = aging.by_execution.get(execution_id) if aging is not None and execution_id else None
    if shape.gang is not None:
        gang = explain_gang(
            shape,
            workers,
            {v.worker: v.fits for v in verdicts},
            {v.worker: not v.permanent for v in verdicts},
        )
        summary = f"{gang.summary}; members: {summary}"
        if own is not None:  # a starving gang: a worker per member (flux.matching.gang_aging)
            summary += (
                f"; waiting {format_wait(now - own.waiting_since)}, nominated workers "
                f"{', '.join(own.workers)}: only work that fits beside its members goes there"
            )
        return Explanation(
            summary, tuple(verdicts), own.worker if own else "", gang_infeasible=gang.infeasible
        )
    if own is None:
        return Explanation(summary, tuple(verdicts))
    waited = format_wait(now - own.waiting_since)
    summary = f"{summary}; waiting {waited}, nominated worker {own.worker}: only work that fits beside it goes there"
    return Explanation(summary, tuple(verdicts), own.worker)


def _reserved(shape: Shape, view: WorkerView, nomination: Nomination, now: float) -> Rejection | None:
    """The nomination's rejection when ``shape`` does not fit beside the nominee on ``view``."""
    if fits_beside(shape, slack_beside(view, nomination.shape)):
        return None
    text = f"reserved for {nomination.execution_id}, waiting {format_wait(now - nomination.waiting_since)}"
    return Rejection(Reason.RESERVED, False, "room beside the nominee", text, f"is {text}", f"are {text}")


def summarize(verdicts: tuple[Verdict, ...]) -> str:
    total = len(verdicts)
    capable = sum(v.fits for v in verdicts)
    head = f"{capable}/{total} workers can run it"
    if total == 0:
        return f"{head}: no worker is connected"
    groups: dict[str, list[tuple[str, Rejection]]] = {}  # detail -> (worker, rejection), first seen first
    for verdict in verdicts:
        for rejection in verdict.rejections:
            groups.setdefault(rejection.detail, []).append((verdict.worker, rejection))
    if not groups:
        return head
    ranked = sorted(groups.values(), key=len, reverse=True)  # stable: ties keep worker-name order
    shown, hidden = ranked[:MAX_SUMMARY_GROUPS], ranked[MAX_SUMMARY_GROUPS:]
    parts = [f"{len(g)} {g[0][1].detail if len(g) == 1 else g[0][1].plural}" for g in shown]
    # The rest, counted by kind: a worker held back by two kinds counts in each, as above.
    by_kind: dict[Reason, set[str]] = {}
    for group in hidden:
        for worker, rejection in group:
            by_kind.setdefault(rejection.reason, set()).add(worker)
    order = list(Reason)
    for reason, workers in sorted(by_kind.items(), key=lambda item: (-len(item[1]), order.index(item[0]))):
        one, several = REST[reason]
        parts.append(f"{len(workers)} more {one if len(workers) == 1 else several}")
    return f"{head}: {', '.join(parts)}"
