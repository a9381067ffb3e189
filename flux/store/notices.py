"""What replicas tell each other through the database, as typed notices.

The PostgreSQL store turns each ``NOTIFY`` (channel, payload) into one of these
on arrival, so nothing above the store parses channel names or payload strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from flux.domain.tenant import DEFAULT_TENANT
from flux.store.base import PendingRef

NOTIFY_LIMIT = 7000  # bytes per NOTIFY payload (PostgreSQL's limit is 8000)


@dataclass(frozen=True, slots=True)
class PendingAdded:
    """Rows became pending (submitted, requeued, swept): any replica may place them."""

    refs: tuple[PendingRef, ...]


@dataclass(frozen=True, slots=True)
class Cancelled:
    execution_id: str


@dataclass(frozen=True, slots=True)
class Finished:
    execution_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkerMoved:
    """A replica took (or gave up) a worker under a new ownership epoch."""

    replica: str
    epoch: int
    name: str


@dataclass(frozen=True, slots=True)
class PauseChanged:
    name: str


@dataclass(frozen=True, slots=True)
class WorkflowsChanged:
    """A replica registered workflows."""

    replica: str


@dataclass(frozen=True, slots=True)
class TenantsChanged:
    """A replica created, changed or deleted tenants: the others apply the terms at once."""

    replica: str


@dataclass(frozen=True, slots=True)
class LimitsChanged:
    """A replica created, changed or deleted named limits: the others reload them at once."""

    replica: str


Notice = (
    PendingAdded | Cancelled | Finished | WorkerMoved | PauseChanged | WorkflowsChanged | TenantsChanged
    | LimitsChanged
)  # fmt: skip

# channel -> the notice its payload becomes
CHANNELS = {
    "flux_pending": lambda payload: PendingAdded(tuple(parse_pending(payload))),
    "flux_cancel": Cancelled,
    "flux_done": lambda payload: Finished(tuple(payload.splitlines())),
    "flux_workers": lambda payload: _worker_moved(*payload.split(" ", 2)),
    "flux_paused": PauseChanged,
    "flux_workflows": WorkflowsChanged,
    "flux_tenants": TenantsChanged,
    "flux_limits": LimitsChanged,
}


def parse(channel: str, payload: str) -> Notice:
    return CHANNELS[channel](payload)  # type: ignore[no-any-return]


def _worker_moved(replica: str, epoch: str, name: str) -> WorkerMoved:
    return WorkerMoved(replica, int(epoch), name)


def pending_line(ref: PendingRef) -> str:
    # The tenant after a tab: a line without one (from a replica before tenants) is tenant default.
    # A retry's wait after a second tab; after a third, "generation created_at attempt started"
    # (a line without them, from an older replica, reads as generation 0, never started).
    line = f"{ref.execution_id} {ref.seq} {ref.workflow_version} {ref.workflow_name}\t{ref.tenant}"
    line = f"{line}\t{ref.not_before!r}\t{ref.generation} {ref.created_at!r} {ref.attempt} {int(ref.started)}"
    # Dependencies after a fourth tab: "waiting when id id ..." (none: an older replica, or none); a
    # gang's size after a fifth (none: an older replica, or no gang).
    dependencies = f"{ref.waiting} {ref.when} {' '.join(ref.after)}" if ref.after else ""
    if ref.gang_size:
        return f"{line}\t{dependencies}\t{ref.gang_size}"
    return f"{line}\t{dependencies}" if dependencies else line


def parse_pending(payload: str) -> list[PendingRef]:
    refs = []
    for line in payload.splitlines():
        line, _, rest = line.partition("\t")
        tenant, _, rest = rest.partition("\t")
        not_before, _, more = rest.partition("\t")
        more, _, dependencies = more.partition("\t")
        dependencies, _, gang_size = dependencies.partition("\t")
        execution_id, seq, version, name = line.split(" ", 3)
        ref = PendingRef(
            execution_id, int(seq), name, int(version), tenant or DEFAULT_TENANT, float(not_before or 0)
        )
        if more:
            generation, created_at, attempt, started = more.split(" ")
            ref = replace(
                ref,
                generation=int(generation),
                created_at=float(created_at),
                attempt=int(attempt),
                started=started == "1",
                gang_size=int(gang_size or 0),
            )
        if dependencies:
            waiting, when, *after = dependencies.split(" ")
            ref = replace(ref, waiting=int(waiting), when=when, after=tuple(after))
        refs.append(ref)
    return refs


def chunks(lines: Iterable[str]) -> Iterable[str]:
    """Newline-joined payloads, each under PostgreSQL's NOTIFY size limit."""
    chunk: list[str] = []
    size = 0
    for line in lines:
        if chunk and size + len(line) + 1 > NOTIFY_LIMIT:
            yield "\n".join(chunk)
            chunk, size = [], 0
        chunk.append(line)
        size += len(line) + 1
    if chunk:
        yield "\n".join(chunk)
