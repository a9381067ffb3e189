"""The durable store: what the dispatcher needs, nothing about SQL.

- ``base``: the ``Store`` interface and its records (``ExecutionQuery``, ``WorkerRecord``, …).
- ``shared``: what a store shared by several replicas adds (``SharedStore``, ``QuotaGuard``, ``FlowGuard``).
- ``sqlite``: ``SqliteStore``, one server; ``postgres``: ``PostgresStore``, several replicas.
- ``schedule_rows``: the schedules' tables and what the ticker needs of a store (``ScheduleRows``).
- ``notices``: the wake-ups replicas send each other; ``group_commit``, ``rows``,
  ``admin_rows``: the backends' shared parts.

The two backends load on first use (``flux.store.SqliteStore``), so code that only names the
interface (the dispatcher, the client's records) does not load a database driver.
"""

from __future__ import annotations

import importlib
from typing import Any

import flux.store.notices as notices
import flux.store.schedule_rows as schedule_rows
from flux.store.base import (
    AuditRecord,
    Conflict,
    ExecutionQuery,
    Held,
    PendingRef,
    Recovered,
    Store,
    StoreError,
    TokenRecord,
    WorkerIdentity,
    WorkerRecord,
    WorkflowRecord,
)
from flux.store.schedule_rows import ScheduleRow, ScheduleRows, TickRun
from flux.store.shared import Bucket, ClusterMembership, FlowGuard, FlowRow, QuotaGuard, SharedStore

__all__ = [
    "AuditRecord", "Bucket", "ClusterMembership", "Conflict", "ExecutionQuery", "FlowGuard", "FlowRow", "Held", "PendingRef",
    "PostgresStore", "QuotaGuard", "Recovered", "ScheduleRow", "ScheduleRows", "SharedStore", "SqliteStore",
    "Store", "StoreError", "TickRun", "TokenRecord", "WorkerIdentity", "WorkerRecord", "WorkflowRecord",
    "notices", "schedule_rows",
]  # fmt: skip

# The backends, by the module that holds each: imported when first named (not at import time,
# and not under TYPE_CHECKING either: flux.store.postgres imports this face for ``notices``).
_BACKENDS = {"SqliteStore": "flux.store.sqlite", "PostgresStore": "flux.store.postgres"}


def __getattr__(name: str) -> Any:
    if name in _BACKENDS:
        return getattr(importlib.import_module(_BACKENDS[name]), name)
    raise AttributeError(f"module 'flux.store' has no attribute {name!r}")
