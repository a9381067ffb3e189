"""Named reasons a worker cannot take an execution, and whether that can change.

As in the Kubernetes scheduler framework, "might fit later" and "never fits"
are different answers: a *busy* worker would fit the execution if it were
idle, an *infeasible* one (``permanent=True``) never will. That split is what
lets ``explain`` tell a user to wait or to change their fleet.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    RUNTIME = "missing_runtime"
    PAUSED = "paused"
    LABEL = "label_mismatch"
    CAPACITY = "at_capacity"
    # A pipelining worker's own queue is not empty: it goes first (flux/matching/prefetch.py).
    QUEUE = "queue_not_empty"
    CPU = "insufficient_cpu"
    MEMORY = "insufficient_memory"
    GPU = "insufficient_gpu"
    GPU_MEMORY = "insufficient_gpu_memory"
    DISK = "insufficient_disk"
    PACKAGE = "missing_package"
    # Nominated by aging for an older execution that this one would delay.
    RESERVED = "reserved"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one worker cannot take one execution now.

    ``detail`` completes the sentence "the worker …" (``"has 2 of 4 cores
    free"``); ``plural`` completes "the workers …", for summaries.
    """

    reason: Reason
    permanent: bool
    wanted: str
    offered: str
    detail: str
    plural: str

    @property
    def busy(self) -> bool:
        return not self.permanent
