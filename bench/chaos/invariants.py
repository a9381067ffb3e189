"""The chaos run's invariants: pure checks over what it observed, each returning its violations.

Nothing here talks to a process: the run collects observations (accepted ids,
the store's records, explanations, lifecycle log lines, resource samples,
cancellations) and hands them over, so every check is unit-tested on crafted
trails (tests/unit/test_chaos_invariants.py).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

# Execution states as the store writes them (flux.v1 ExecutionState numbers).
CREATED, SCHEDULED, RUNNING, COMPLETED, FAILED, CANCELLED = 1, 2, 3, 4, 5, 6
FINAL = frozenset({COMPLETED, FAILED, CANCELLED})
STATE_NAMES = {CREATED: "CREATED", SCHEDULED: "SCHEDULED", RUNNING: "RUNNING", COMPLETED: "COMPLETED",
               FAILED: "FAILED", CANCELLED: "CANCELLED"}  # fmt: skip

# The shape no worker can ever take: it must stay CREATED, explained.
NEVER_FITS = "never_fits"
# The shape whose body sleeps past its timeout: each of its executions must end by it.
TIMES_OUT = "times_out"
# Lifecycle events that decide a final state (flux.dispatcher.state.lifecycle.Lifecycle.finished).
FINISHED_EVENTS = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class Violation:
    """One broken invariant: ``kind`` (lost, result_mismatch, ...), what it concerns, and why."""

    kind: str
    subject: str  # an execution id, or a worker name for overcommit
    detail: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class AttemptSeen:
    """One ended attempt as the store recorded it (the row's ``attempts``)."""

    attempt: int
    worker: str
    started_at: float
    ended_at: float
    reason: str  # completed, error, timeout, heartbeat_timeout, worker_lost, preempted


@dataclass(frozen=True)
class Record:
    """An execution as the store holds it at the end."""

    execution_id: str
    state: int
    worker: str = ""
    attempt: int = 1
    output_json: str = ""
    max_attempts: int = 0  # 0: not known (checks that need it skip the record)
    reason: str = ""
    attempts: tuple[AttemptSeen, ...] = ()
    updated_at: float = 0.0  # its last change (a final state: when it ended), server clock


@dataclass(frozen=True)
class Explained:
    """What ExplainExecution said about an execution still CREATED."""

    infeasible: bool
    summary: str


@dataclass(frozen=True)
class Sample:
    """One worker's load at one instant, from the server's listing or from its marker files."""

    at: float
    worker: str
    source: str  # "server" (reserved vs advertised) or "markers" (what the process runs)
    cpu: int
    cpu_limit: int
    count: int
    capacity: int
    ids: tuple[str, ...] = ()  # the executions whose bodies the markers showed (markers only)


@dataclass(frozen=True)
class TenantSample:
    """The cores each tenant held at one instant, as the server (one) or the database (replicas) counts them."""

    at: float
    source: str
    cpu: Mapping[str, int]


@dataclass(frozen=True)
class Quotas:
    """The run's tenants: each one's cap (nominal + borrowing limit, in cores) and its cohort's pool."""

    caps: Mapping[str, int] = field(default_factory=dict)
    cohorts: Mapping[str, tuple[tuple[str, ...], int]] = field(default_factory=dict)  # name -> members, pool


@dataclass
class Observations:
    """Everything a run hands to ``check``."""

    accepted: dict[str, str] = field(default_factory=dict)  # id -> shape
    records: dict[str, Record] = field(default_factory=dict)
    explained: dict[str, Explained] = field(default_factory=dict)
    lifecycle: list[dict[str, object]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    cancelled: set[str] = field(default_factory=set)  # ids whose Cancel answered CANCELLED
    undrained: list[str] = field(default_factory=list)  # unfinished, not never-fits, at the drain's bound
    drain_bound_s: float = 0.0
    tenant_samples: list[TenantSample] = field(default_factory=list)
    quotas: Quotas = field(default_factory=Quotas)
    must_time_out: set[str] = field(default_factory=set)  # ids whose body sleeps past its timeout


def lost(
    accepted: Mapping[str, str], records: Mapping[str, Record], explained: Mapping[str, Explained]
) -> list[Violation]:
    """Every accepted id is final, or CREATED because it can never fit and explain says why."""
    found = []
    for execution_id, shape in accepted.items():
        record = records.get(execution_id)
        if record is None:
            found.append(Violation("lost", execution_id, f"{shape}: accepted but missing from the store"))
        elif record.state in FINAL:
            continue
        elif record.state != CREATED:
            state = STATE_NAMES.get(record.state, str(record.state))
            found.append(Violation("lost", execution_id, f"{shape}: still {state} on {record.worker or '-'}"))
        else:
            why = explained.get(execution_id)
            if shape != NEVER_FITS:
                said = f"; explain: {why.summary}" if why else ""
                found.append(
                    Violation("lost", execution_id, f"{shape}: still CREATED although it fits{said}")
                )
            elif why is None or not why.infeasible or not why.summary:
                said = why.summary if why else "no explanation"
                found.append(
                    Violation("lost", execution_id, f"{shape}: CREATED, not explained as infeasible: {said}")
                )
    return found


def never_fits_ran(accepted: Mapping[str, str], records: Mapping[str, Record]) -> list[Violation]:
    """The shape that needs more than any worker has never ran anywhere."""
    return [
        Violation(
            "overcommit", execution_id, f"never_fits ran: {STATE_NAMES.get(record.state)} on {record.worker}"
        )
        for execution_id, shape in accepted.items()
        if shape == NEVER_FITS
        and (record := records.get(execution_id)) is not None
        and record.state == COMPLETED
    ]


def result_mismatches(records: Iterable[Record]) -> list[Violation]:
    """A COMPLETED record's attempt and worker are those of the run whose output it keeps."""
    found = []
    for record in records:
        if record.state != COMPLETED:
            continue
        try:
            output = json.loads(record.output_json)
        except ValueError:
            output = None
        if not isinstance(output, dict):
            found.append(
                Violation(
                    "result_mismatch", record.execution_id, f"output is not a result: {record.output_json!r}"
                )
            )
            continue
        recorded = (record.execution_id, record.attempt, record.worker)
        ran = (output.get("execution_id"), output.get("attempt"), output.get("worker"))
        if ran != recorded:
            found.append(Violation("result_mismatch", record.execution_id,
                                   f"record says attempt {record.attempt} on {record.worker}; the output "
                                   f"came from attempt {ran[1]} on {ran[2]} (execution {ran[0]})"))  # fmt: skip
    return found


def parse_lifecycle(lines: Iterable[str]) -> list[dict[str, object]]:
    """The ``flux.lifecycle`` events among a server's --log-format json lines (others skipped)."""
    events = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("logger") == "flux.lifecycle" and "event" in entry:
            events.append(entry)
    return events


def duplicates(events: Iterable[Mapping[str, object]]) -> list[Violation]:
    """No (execution, generation) dispatched twice; no execution finished under two generations."""
    dispatched: dict[tuple[object, object], int] = defaultdict(int)
    finished: dict[object, set[object]] = defaultdict(set)
    said: dict[object, list[str]] = defaultdict(list)  # each final event, where the run saw it
    for event in events:
        kind, execution_id, generation = (
            event.get("event"),
            event.get("execution_id"),
            event.get("generation"),
        )
        if kind == "dispatched":
            dispatched[(execution_id, generation)] += 1
        elif kind in FINISHED_EVENTS:
            finished[execution_id].add(generation)
            where = f" in {event['log']}" if event.get("log") else ""
            said[execution_id].append(f"{kind} at generation {generation}{where}")
    found = [
        Violation("duplicate", str(execution_id), f"generation {generation} dispatched {count} times")
        for (execution_id, generation), count in dispatched.items()
        if count > 1
    ]
    found += [
        Violation(
            "duplicate",
            str(execution_id),
            f"finished under generations {sorted(map(str, generations))}: {'; '.join(said[execution_id])}",
        )
        for execution_id, generations in finished.items()
        if len(generations) > 1
    ]
    return found


def overcommit(samples: Iterable[Sample]) -> list[Violation]:
    """No sample shows a worker over its cores or its capacity."""
    return [
        Violation(
            "overcommit",
            sample.worker,
            f"{sample.source} at t={sample.at:.1f}s: cpu {sample.cpu}/{sample.cpu_limit}, "
            f"executions {sample.count}/{sample.capacity}"
            + (f" ({', '.join(sample.ids)})" if sample.ids else ""),
        )  # fmt: skip
        for sample in samples
        if sample.cpu > sample.cpu_limit or sample.count > sample.capacity
    ]


def over_quota(samples: Iterable[TenantSample], quotas: Quotas) -> list[Violation]:
    """No tenant ever holds more than its quota plus its borrowing limit; no cohort more than its pool."""
    found = []
    for sample in samples:
        for tenant, cap in quotas.caps.items():
            held = sample.cpu.get(tenant, 0)
            if held > cap:
                found.append(
                    Violation(
                        "quota", tenant, f"{sample.source} at t={sample.at:.1f}s: {held} cores, cap {cap}"
                    )
                )
        for cohort, (members, pool) in quotas.cohorts.items():
            held = sum(sample.cpu.get(member, 0) for member in members)
            if held > pool:
                found.append(
                    Violation(
                        "quota",
                        f"cohort {cohort}",
                        f"{sample.source} at t={sample.at:.1f}s: {held} cores, pool {pool}",
                    )
                )
    return found


def cancelled_completed(cancelled: Iterable[str], records: Mapping[str, Record]) -> list[Violation]:
    """An id whose Cancel answered CANCELLED ends CANCELLED."""
    found = []
    for execution_id in cancelled:
        record = records.get(execution_id)
        if record is None or record.state != CANCELLED:
            state = "missing" if record is None else STATE_NAMES.get(record.state, str(record.state))
            found.append(
                Violation("cancelled_completed", execution_id, f"cancel answered CANCELLED; ended {state}")
            )
    return found


def undrained(remaining: Sequence[str], bound_s: float) -> list[Violation]:
    """After the faults stop, everything but the never-fits shape finishes within the bound."""
    if not remaining:
        return []
    shown = ", ".join(remaining[:5]) + (" ..." if len(remaining) > 5 else "")
    return [Violation("drain", "queue", f"{len(remaining)} unfinished after {bound_s:g}s of drain: {shown}")]


def beyond_max_attempts(records: Iterable[Record]) -> list[Violation]:
    """No attempt is numbered past the execution's ``max_attempts`` (a manual retry raises it)."""
    found = []
    for record in records:
        if not record.max_attempts:
            continue
        highest = max([record.attempt, *(a.attempt for a in record.attempts)])
        if highest > record.max_attempts:
            found.append(
                Violation(
                    "beyond_max_attempts",
                    record.execution_id,
                    f"attempt {highest} of at most {record.max_attempts}",
                )  # fmt: skip
            )
    return found


def overlapping_attempts(records: Iterable[Record]) -> list[Violation]:
    """Never two attempts of one execution running at once: each recorded attempt ended before the
    next one started (a preempted attempt included)."""
    found = []
    for record in records:
        ordered = sorted(record.attempts, key=lambda a: (a.started_at, a.attempt))
        for before, after in zip(ordered, ordered[1:], strict=False):
            if before.ended_at > after.started_at:
                found.append(
                    Violation(
                        "overlapping_attempts",
                        record.execution_id,
                        f"attempt {after.attempt} started on {after.worker or '-'} at {after.started_at:.3f}, "
                        f"before attempt {before.attempt} on {before.worker or '-'} ended at {before.ended_at:.3f}",
                    )  # fmt: skip
                )
    return found


def retried_after_completed(records: Iterable[Record]) -> list[Violation]:
    """No attempt after one that COMPLETED, and a COMPLETED execution's last attempt is that one."""
    found = []
    for record in records:
        ordered = sorted(record.attempts, key=lambda a: a.attempt)
        done = [a for a in ordered if a.reason == "completed"]
        later = [a for a in ordered if done and a.attempt > done[0].attempt]
        if later or len(done) > 1:
            found.append(
                Violation(
                    "retried_after_completed",
                    record.execution_id,
                    f"attempt {done[0].attempt} completed, then attempt {(later or done[1:])[0].attempt} ran",
                )  # fmt: skip
            )
        elif done and record.attempt != done[0].attempt:
            found.append(
                Violation(
                    "retried_after_completed",
                    record.execution_id,
                    f"attempt {done[0].attempt} completed; the row is at attempt {record.attempt}",
                )  # fmt: skip
            )
    return found


def timeouts_fired(must_time_out: Iterable[str], records: Mapping[str, Record]) -> list[Violation]:
    """Every execution whose body sleeps past its timeout ends FAILED with reason ``timeout``, each of
    its attempts that ran to the end stopped for it (none completed).

    A worker the chaos kills may end an attempt first: its last one may end ``worker_lost``, when
    an earlier one timed out (a body that never timed out is not let off by a kill)."""
    found = []
    for execution_id in must_time_out:
        record = records.get(execution_id)
        if record is None or record.state == CANCELLED:
            continue  # lost is its own invariant; a cancel may come first
        completed = [a.attempt for a in record.attempts if a.reason == "completed"]
        timed_out = any(a.reason == "timeout" for a in record.attempts)
        killed = record.reason == "worker_lost" and timed_out
        if record.state != FAILED or (record.reason != "timeout" and not killed) or completed:
            state = STATE_NAMES.get(record.state, str(record.state))
            said = f"; attempt {completed[0]} completed" if completed else ""
            found.append(
                Violation(
                    "timeout_not_fired",
                    execution_id,
                    f"ended {state} with reason {record.reason or '-'}{said}, not FAILED with reason timeout",
                )  # fmt: skip
            )
    return found


def check(observed: Observations) -> dict[str, list[Violation]]:
    """Every invariant over one run's observations, by the figure the result reports."""
    return {
        "lost": lost(observed.accepted, observed.records, observed.explained),
        "duplicates": duplicates(observed.lifecycle) + result_mismatches(observed.records.values()),
        "overcommit": overcommit(observed.samples) + never_fits_ran(observed.accepted, observed.records),
        "cancelled_completed": cancelled_completed(observed.cancelled, observed.records),
        "drain": undrained(observed.undrained, observed.drain_bound_s),
        "quota": over_quota(observed.tenant_samples, observed.quotas),
        "attempts": beyond_max_attempts(observed.records.values())
        + overlapping_attempts(observed.records.values())
        + retried_after_completed(observed.records.values())
        + timeouts_fired(observed.must_time_out, observed.records),
    }
