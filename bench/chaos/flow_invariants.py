"""The chaos run's flow-control invariants: no key above its ``max``, no rate exceeded over any
window, no batch above its ``max_concurrent``.

Pure checks over what the run observed, like invariants.py (beside it, not in it: that module is
long enough). The load submits keyed work (``chaos_keyed``: ``Concurrency(max=2, key="key")``)
and rated work (``chaos_paced``: ``RateLimit("2/s")``, submitted in bursts so the bucket binds);
each tenant's keys and buckets are its own, so both are checked per tenant.

The load also maps small batches (``max_concurrent=2``), each batch its own budget.

Keys and batches are sampled from the store's SCHEDULED and RUNNING rows (the witness the replicas' claims
count too). A rate is checked on the bodies' starts (the stored attempts' ``started_at``, or the body's own
``started`` for a first try that completed): every
attempt takes a token when it is claimed, and starts within the ack deadline of that (a dispatch
not claimed by then goes back in line and takes a new token), so the starts in any window of
``w`` seconds come from the tokens of ``w + lag`` seconds. A bucket hands out at most
``rate * (w + lag) + burst`` tokens over that, and on one server at most ``burst`` admitted runs
wait unplaced besides (flux/matching/flow.py), hence the bound ``rate * (w + lag) + 2 * burst``.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bench.chaos.invariants import COMPLETED, Record, Violation

KEYED = "chaos_keyed"
PACED = "chaos_paced"
KEY_MAX = 2  # chaos_keyed's Concurrency(max=2)
BATCH_MAX = 2  # the load's batches: client.map(..., max_concurrent=2)
RATE, BURST = 2.0, 1  # chaos_paced's RateLimit("2/s")
WINDOWS_S = (1.0, 5.0, 10.0)


@dataclass(frozen=True)
class KeySample:
    """How many rows of each key were SCHEDULED or RUNNING at one instant: ``held[(tenant, key)]``."""

    at: float
    source: str
    held: Mapping[tuple[str, str], int]


@dataclass(frozen=True)
class RateTerms:
    """The rated workflow's terms, and how late a start may follow its token (the ack deadline)."""

    rate: float = RATE
    burst: int = BURST
    lag_s: float = 3.0

    def most(self, window_s: float) -> int:
        return math.floor(self.rate * (window_s + self.lag_s) + 1e-9) + 2 * self.burst


def over_key_max(samples: Iterable[KeySample], most: int = KEY_MAX) -> list[Violation]:
    """No sample shows a tenant's key with more than ``most`` rows SCHEDULED or RUNNING."""
    return [
        Violation(
            "flow_key", f"{tenant}/{key}", f"{sample.source} at t={sample.at:.1f}s: {held} held, max {most}"
        )
        for sample in samples
        for (tenant, key), held in sorted(sample.held.items())
        if held > most
    ]


def over_batch_max(samples: Iterable[KeySample], most: int = BATCH_MAX) -> list[Violation]:
    """No sample shows a batch with more than ``most`` members SCHEDULED or RUNNING (``held`` is
    per (tenant, batch id))."""
    return [
        Violation(
            "flow_batch",
            batch_id,
            f"{sample.source} at t={sample.at:.1f}s: {held} held, max_concurrent {most}",
        )
        for sample in samples
        for (_, batch_id), held in sorted(sample.held.items())
        if held > most
    ]


def starts(records: Mapping[str, Record], owner: Mapping[str, str]) -> dict[str, list[float]]:
    """Each tenant's bodies' start times, sorted; ``owner`` maps an execution id to its tenant
    (absent: the run's own, "default"). Every recorded attempt that started counts; a first try
    that completed records no attempt (its row keeps none), so its body's own ``started`` does."""
    found: dict[str, list[float]] = {}
    for execution_id, record in records.items():
        times = [a.started_at for a in record.attempts if a.started_at > 0]
        if not record.attempts and record.state == COMPLETED:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                times.append(float(json.loads(record.output_json)["started"]))
        found.setdefault(owner.get(execution_id, "default"), []).extend(times)
    return {tenant: sorted(times) for tenant, times in found.items() if times}


def over_rate(
    started: Mapping[str, Sequence[float]],
    terms: RateTerms = RateTerms(),
    windows_s: Sequence[float] = WINDOWS_S,
) -> list[Violation]:
    """No window of any of ``windows_s`` holds more of a tenant's starts than ``terms.most`` allows
    (one violation per tenant and window: the busiest one)."""
    found = []
    for tenant, times in sorted(started.items()):
        times = sorted(times)
        for window in windows_s:
            busiest, first, end = 0, 0, 0
            for i, t in enumerate(times):  # two pointers: the starts in [t, t + window)
                end = max(end, i)
                while end < len(times) and times[end] < t + window:
                    end += 1
                if end - i > busiest:
                    busiest, first = end - i, i
            if busiest > terms.most(window):
                found.append(
                    Violation(
                        "flow_rate",
                        tenant,
                        f"{busiest} starts in the {window:g}s from {times[first]:.3f}; at most "
                        f"{terms.most(window)} at {terms.rate:g}/s, burst {terms.burst}, lag {terms.lag_s:g}s",
                    )  # fmt: skip
                )
    return found
