"""The chaos run's dependency invariant: a dependent never starts before its dependencies satisfy
its ``when`` (the load's dependents all use the default, ``succeeded``).

Pure, like invariants.py beside it (tests/unit/test_chaos_dependencies.py): a dependent that ran
(an attempt recorded, or its completed output's ``started``) must have every dependency
COMPLETED, each ended (its row's final ``updated_at``) before the dependent's first start; and a
dependent whose dependency ended otherwise must end CANCELLED with reason ``dependency``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from bench.chaos.invariants import CANCELLED, COMPLETED, FINAL, STATE_NAMES, Record, Violation

# The dependency's end is the server's clock just before its commit; a start is the server's
# claim or the worker's body on the same machine: no skew to allow for but the rounding.
TOLERANCE_S = 0.001


def first_start(record: Record) -> float | None:
    """When any attempt of ``record`` first started, or None if none ever did."""
    starts = [a.started_at for a in record.attempts if a.started_at]
    if record.state == COMPLETED:
        try:
            started = json.loads(record.output_json).get("started")
        except (ValueError, AttributeError):
            started = None
        if isinstance(started, (int, float)):
            starts.append(float(started))
    return min(starts) if starts else None


def check(after: Mapping[str, tuple[str, ...]], records: Mapping[str, Record]) -> list[Violation]:
    found = []
    for dependent_id, dependency_ids in sorted(after.items()):
        dependent = records.get(dependent_id)
        if dependent is None:
            continue  # lost: invariants.lost reports it
        started = first_start(dependent)
        for dependency_id in dependency_ids:
            dependency = records.get(dependency_id)
            state = dependency.state if dependency is not None else 0
            if started is not None and state != COMPLETED:
                found.append(Violation("dependency", dependent_id,
                                       f"started though dependency {dependency_id} is {STATE_NAMES.get(state, state)}"))  # fmt: skip
            elif (
                started is not None
                and dependency is not None
                and started < dependency.updated_at - TOLERANCE_S
            ):
                early = (dependency.updated_at - started) * 1000
                found.append(Violation("dependency", dependent_id,
                                       f"started {early:.1f} ms before dependency {dependency_id} ended"))  # fmt: skip
            elif (
                state in FINAL
                and state != COMPLETED
                and dependent.state in FINAL
                and (dependent.state != CANCELLED or dependent.reason != "dependency")
            ):
                found.append(Violation("dependency", dependent_id,
                                       f"dependency {dependency_id} ended {STATE_NAMES[state]} but it ended "
                                       f"{STATE_NAMES.get(dependent.state)} ({dependent.reason or 'no reason'}), "
                                       "not CANCELLED for its dependency"))  # fmt: skip
    return found
