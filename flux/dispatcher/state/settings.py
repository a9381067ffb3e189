"""The dispatcher's settings; the defaults a user can change are in ``flux.defaults``."""

from __future__ import annotations

from dataclasses import dataclass

from flux import defaults
from flux.defaults import KiB, MiB


@dataclass(frozen=True, slots=True)
class Settings:
    ack_deadline: float = defaults.ACK_DEADLINE
    grace_period: float = defaults.GRACE_PERIOD
    safety_tick: float = defaults.SAFETY_TICK
    ping_interval: float = defaults.PING_INTERVAL
    finished_cache: int = 10_000
    # Payload bytes (inputs, outputs, errors) the finished cache may keep; older entries are
    # dropped past it and read back from the store when asked for.
    finished_cache_bytes: int = 16 * MiB
    server_id: str = ""
    # Inputs up to this size stay in RAM while pending (a dispatch needs no store read);
    # larger ones stay only in the store and load when dispatched.
    inline_input_bytes: int = 16 * KiB
    # Admission: past either limit a submission is refused with RESOURCE_EXHAUSTED.
    max_pending: int = defaults.MAX_PENDING
    max_pending_bytes: int = defaults.MAX_PENDING_BYTES
    max_workers: int = defaults.MAX_WORKERS
    # Labels, packages, markers and GPU names one worker may advertise, in bytes.
    max_worker_metadata: int = defaults.MAX_WORKER_METADATA
    # Aging (--starvation-after): seconds the oldest execution of a shape waits before it is
    # nominated a worker; 0 turns aging off.
    starvation_after: float = defaults.STARVATION_AFTER
    # Reclaim (--preemption, --preemption-grace): a tenant under its nominal quota may preempt
    # what its cohort borrowed; the victims' workers have this long to hand them back.
    # --infeasible-after: seconds work no worker or pool could ever run may wait before it ends
    # FAILED (reason pending_timeout); 0, the default, only says it is infeasible.
    infeasible_after: float = 0.0
    # --placement: which capable worker work goes to when its workflow names no policy of its
    # own: "spread" (least loaded) or "binpack" (fullest that fits; flux.matching.placement).
    placement: str = "spread"
    preemption: bool = True
    preemption_grace: float = defaults.PREEMPTION_GRACE
    # Victims each tenant's preemptions may stop a minute (--preemption-budget); 0: no limit.
    preemption_budget: int = defaults.PREEMPTION_BUDGET
    # Replicas on PostgreSQL (--dispatch-retention): seconds the dispatches log keeps the rows
    # of an execution after it finished; 0 keeps them all.
    dispatch_retention: float = defaults.DISPATCH_RETENTION
