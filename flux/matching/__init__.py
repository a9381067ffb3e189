"""The pure matching core: no grpc, protobuf or asyncio here.

- ``filters``: feasibility checks, each returning a named ``Rejection``.
- ``scheduler.schedule``: one FIFO, least-loaded placement pass.
- ``index.FleetIndex``: the fleet kept per changed worker, walked per shape by load.
- ``explain``: why an execution is pending.
- ``aging``: nominated workers for executions that waited too long, and backfill.
- ``tenancy``: tenants' quotas, cohort borrowing and DRF fair share (``Accounts``).
- ``preemption``: which borrowed executions to preempt so a tenant gets its quota back.
"""

from flux.matching.aging import DEFAULT_STARVATION_AFTER, Aging, Nomination, format_wait
from flux.matching.explain import Explanation, Verdict, explain
from flux.matching.filters import FILTERS, fits_now, permanent_rejection, rejections
from flux.matching.preemption import Budget, Preemption, Running
from flux.matching.preemption import plan as plan_preemption
from flux.matching.queue import Pending, PendingQueue
from flux.matching.reasons import Reason, Rejection
from flux.matching.scheduler import FeasibilityCache, Placement, schedule
from flux.matching.shape import Shape
from flux.matching.tenancy import Accounts, Ledger, QuotaBlock, capacity_of, demand
from flux.matching.view import DEFAULT_CAPACITY, Amounts, Profile, Room, WorkerView

__all__ = [
    "Accounts",
    "Ledger",
    "Preemption",
    "Running",
    "plan_preemption",
    "Budget",
    "QuotaBlock",
    "capacity_of",
    "demand",
    "DEFAULT_CAPACITY",
    "DEFAULT_STARVATION_AFTER",
    "Aging",
    "Nomination",
    "format_wait",
    "FILTERS",
    "Amounts",
    "Explanation",
    "FeasibilityCache",
    "Pending",
    "PendingQueue",
    "Placement",
    "Profile",
    "Reason",
    "Rejection",
    "Room",
    "Shape",
    "Verdict",
    "WorkerView",
    "explain",
    "fits_now",
    "permanent_rejection",
    "rejections",
    "schedule",
]
