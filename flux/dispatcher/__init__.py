"""The async dispatcher: where a dispatch decision is carried out.

- ``core.Dispatcher``: the one object the servers call; it owns the state and runs the cycle.
- ``handle``: what the parts below may read and call of it (``Handle``) and the mode protocols.
- ``cycle``: when a scheduling pass runs; the decision itself is ``flux.matching.schedule`` (pure).
- ``transitions``: submit in bulk, claim, complete, release, requeue, lose, expire, preempt.
- ``state``: executions, workflows, workers, tenants, pools, and the checks on every input.
- ``reads``: listings and waiting, which change nothing.
- ``modes``: one server (``local``) or replicas on PostgreSQL (``shared``).

Importing this package loads nothing; ``Dispatcher`` and the names below load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Diagnosis", "Dispatcher", "Settings", "WorkerRegistration"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("flux.dispatcher.core"), name)
    raise AttributeError(f"module 'flux.dispatcher' has no attribute {name!r}")
