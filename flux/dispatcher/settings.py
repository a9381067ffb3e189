"""The dispatcher's settings, each default defined here once."""

from __future__ import annotations

from dataclasses import dataclass

KiB, MiB, GiB = 1024, 1024**2, 1024**3


@dataclass(frozen=True, slots=True)
class Settings:
    ack_deadline: float = 10.0
    grace_period: float = 30.0
    safety_tick: float = 5.0
    ping_interval: float = 15.0
    finished_cache: int = 10_000
    # Payload bytes (inputs, outputs, errors) the finished cache may keep; older entries are
    # dropped past it and read back from the store when asked for.
    finished_cache_bytes: int = 16 * MiB
    server_id: str = ""
    # Inputs up to this size stay in RAM while pending (a dispatch needs no store read);
    # larger ones stay only in the store and load when dispatched.
    inline_input_bytes: int = 16 * KiB
    # Admission: past either limit a submission is refused with RESOURCE_EXHAUSTED.
    max_pending: int = 500_000
    max_pending_bytes: int = 2 * GiB
    max_workers: int = 10_000
    # Labels, packages, markers and GPU names one worker may advertise, in bytes.
    max_worker_metadata: int = 256 * KiB
