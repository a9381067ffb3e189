"""The worker registry: who is registered, with which token, and what each may do.

A worker registers (name, token), opens its stream (``connect``), reports what
it has, and may be paused or forgotten by an operator. Losing a worker and
placing work are the dispatcher's (``housekeeping.lose_worker``): the registry
only tells ``passes`` when a worker has room (connected, reported, resumed).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from flux.dispatcher.state import validation
from flux.dispatcher.state.session import Session
from flux.dispatcher.state.worker_entry import WorkerEntry
from flux.domain.labels import validate_labels
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied, ResourceExhausted
from flux.matching import DEFAULT_CAPACITY
from flux.matching.index import FleetIndex
from flux.store import WorkerIdentity

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flux.dispatcher.cycle.passes import Passes
    from flux.dispatcher.state.lifecycle import Lifecycle
    from flux.dispatcher.state.quotas import TenantUsage
    from flux.dispatcher.state.settings import Settings
    from flux.domain.resource_request import ResourceRequest
    from flux.store import Store

log = logging.getLogger("flux.dispatcher")


@dataclass(frozen=True, slots=True)
class WorkerRegistration:
    name: str
    resources: WorkerResources
    software: WorkerSoftware
    labels: Mapping[str, str]
    capacity: int = 0
    session_token: str = ""
    transport: str = "grpc"
    # Where gang members reach it (``--advertise-address``, else the host it connected from).
    address: str = ""
    # Executions it may hold beyond its room in its own queue (--prefetch; 0: none).
    prefetch: int = 0


def placeholder(name: str, session_token: str, disconnected_at: float, last_seen: float = 0.0) -> WorkerEntry:
    """An entry for a worker known to hold work but not connected (recovered, or adopted from
    another replica): it has its grace period to reconnect, and reports its resources then."""
    return WorkerEntry(
        name=name,
        session_token=session_token,
        labels=MappingProxyType({}),
        capacity=DEFAULT_CAPACITY,
        resources=WorkerResources(),
        software=WorkerSoftware(),
        last_seen=last_seen,
        disconnected_at=disconnected_at,
    )


class _Entries(dict[str, WorkerEntry]):
    """Workers by name; notes each name whose entry is added, replaced, removed or changed."""

    def __init__(self, changed: set[str], usage: TenantUsage | None):
        super().__init__()
        self._changed = changed
        # Who hears of every reservation taken and given back: tenants' usage, flow control.
        self._hooks: list[tuple[Callable[[str, ResourceRequest], None], Callable[[str], None]]] = []
        if usage is not None:
            self._hooks.append((usage.held, usage.released))

    def listen(
        self, on_hold: Callable[[str, ResourceRequest], None], on_release: Callable[[str], None]
    ) -> None:
        self._hooks.append((on_hold, on_release))
        for entry in self.values():
            entry.on_hold, entry.on_release = self._held, self._released

    def _held(self, execution_id: str, requests: ResourceRequest) -> None:
        for on_hold, _ in self._hooks:
            on_hold(execution_id, requests)

    def _released(self, execution_id: str) -> None:
        for _, on_release in self._hooks:
            on_release(execution_id)

    def _note(self, entry: WorkerEntry) -> None:
        self._changed.add(entry.name)

    def __setitem__(self, name: str, entry: WorkerEntry) -> None:
        entry.on_change = self._note
        if len(self._hooks) == 1:
            entry.on_hold, entry.on_release = self._hooks[0]
        elif self._hooks:
            entry.on_hold, entry.on_release = self._held, self._released
        super().__setitem__(name, entry)
        self._changed.add(name)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self._changed.add(name)

    def pop(self, name: str, *default: WorkerEntry | None) -> WorkerEntry | None:  # type: ignore[override]
        self._changed.add(name)
        return super().pop(name, *default)


class WorkerRegistry:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        clock: Callable[[], float],
        events: Lifecycle,
        passes: Passes,
        generation_of: Callable[[str], int],
        usage: TenantUsage | None = None,
    ):
        self.store = store
        self.settings = settings
        self.clock = clock
        self.events = events
        self._passes = passes
        self._generation_of = generation_of
        # The dispatchable workers' views, kept one changed entry at a time (``index``).
        self._index = FleetIndex()
        self._changed: set[str] = set()
        # The workers whose own queue has space (``WorkerEntry.hungry``), kept with the index.
        self.hungry: dict[str, WorkerEntry] = {}
        # The workers holding anything in their own queue, kept with the index.
        self.queuing: dict[str, WorkerEntry] = {}
        self.entries: dict[str, WorkerEntry] = _Entries(self._changed, usage)
        # How an unknown name is refused; a replica says "not connected here" (the worker retries).
        self.unknown: Callable[[str], Exception] = lambda name: NotFound(
            f"worker {name!r} is not registered; call Register first"
        )

    def __len__(self) -> int:
        return len(self.entries)

    def listen(
        self, on_hold: Callable[[str, ResourceRequest], None], on_release: Callable[[str], None]
    ) -> None:
        """Hear of every reservation a worker takes and gives back (flow control's budgets)."""
        self.entries.listen(on_hold, on_release)  # type: ignore[attr-defined]

    def index(self) -> FleetIndex:
        """Every dispatchable worker's current view, brought up to date for the entries that changed."""
        changed = self._changed
        while changed:
            self._reindex(changed.pop())
        return self._index

    def queue_space(self) -> list[WorkerEntry]:
        """The workers whose own queue has space now (none unless a worker asked to prefetch)."""
        self.index()
        return list(self.hungry.values())

    def waiting_queues(self) -> list[WorkerEntry]:
        """The workers holding anything in their own queue now."""
        self.index()
        return list(self.queuing.values())

    def _reindex(self, name: str) -> None:
        entry = self.entries.get(name)
        if entry is not None and entry.dispatchable:
            entry.profile = self._index.put(entry.view())
        else:
            self._index.discard(name)
        if entry is not None and entry.hungry:
            self.hungry[name] = entry
        else:
            self.hungry.pop(name, None)
        if entry is not None and entry.queued:
            self.queuing[name] = entry
        else:
            self.queuing.pop(name, None)

    def get(self, name: str) -> WorkerEntry | None:
        return self.entries.get(name)

    def values(self) -> Iterable[WorkerEntry]:
        return self.entries.values()

    def sorted(self) -> list[WorkerEntry]:
        return sorted(self.entries.values(), key=lambda w: w.name)

    def remove(self, entry: WorkerEntry) -> None:
        if self.entries.get(entry.name) is entry:
            del self.entries[entry.name]

    def authorize(self, name: str, session_token: str) -> WorkerEntry:
        entry = self.entries.get(name)
        if entry is None:
            raise self.unknown(name)
        if not session_token or not validation.same_token(session_token, entry.session_token):
            raise PermissionDenied(
                f"session_token does not match worker {name!r}; use the token Register returned"
            )
        entry.last_seen = self.clock()
        return entry

    def expired(self, registration: WorkerRegistration) -> WorkerEntry | None:
        """The entry ``registration`` would take the name of once its worker is lost: a stream gone
        past its grace period (the housekeeper had not noticed yet), registered by another process."""
        entry = self.entries.get(registration.name)
        if entry is None or entry.connected or self.clock() < self._frees_at(entry):
            return None
        token = registration.session_token
        return None if token and validation.same_token(token, entry.session_token) else entry

    def _frees_at(self, entry: WorkerEntry) -> float:
        return (entry.disconnected_at or self.clock()) + self.settings.grace_period

    async def register(self, registration: WorkerRegistration, paused: bool = False) -> str:
        """``paused``: the name was paused under an entry lost just before (``expired``)."""
        name = registration.name
        validation.check_worker(name, registration.capacity, DEFAULT_CAPACITY, registration.prefetch)
        try:
            labels = MappingProxyType(validate_labels(dict(registration.labels), "labels"))
            registration.resources.validate()
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(str(exc)) from None
        validation.check_software(registration.software)
        validation.check_metadata(
            labels, registration.software, registration.resources, self.settings.max_worker_metadata
        )
        capacity = registration.capacity or DEFAULT_CAPACITY
        entry = self.entries.get(name)
        same_worker = bool(
            entry
            and registration.session_token
            and validation.same_token(registration.session_token, entry.session_token)
        )
        address = validation.checked_address(registration.address)
        if entry is not None and same_worker:
            entry.labels, entry.capacity, entry.transport = labels, capacity, registration.transport
            entry.address = address
            entry.prefetch = registration.prefetch
            entry.report(registration.resources, registration.software)
            return entry.session_token
        if entry is not None and entry.connected:
            raise AlreadyExists(
                f"worker name {name!r} is held by a live stream; pick another name, or reconnect with its session token"
            )
        if entry is not None:
            # The grace period belongs to the worker whose stream dropped: only its session
            # token takes the name back. Anyone else waits for it to end (or for an operator).
            # (One whose grace has ended was lost before this call: ``expired``.)
            raise AlreadyExists(validation.name_held(name, self._frees_at(entry)))
        elif len(self.entries) >= self.settings.max_workers:
            raise ResourceExhausted(
                f"{len(self.entries)} workers are registered; the limit is {self.settings.max_workers} "
                "(--max-workers); forget stale ones with 'flux worker forget NAME'"
            )
        token = secrets.token_urlsafe(24)
        now = self.clock()
        new = placeholder(name, token, now, last_seen=now)
        new.labels, new.capacity, new.transport = labels, capacity, registration.transport
        new.address = address
        new.prefetch = registration.prefetch
        new.resources, new.software = registration.resources, registration.software
        # A pause is the operator's, by name (as a cordon is): a new process under the name stays paused.
        new.paused = paused or (entry is not None and entry.paused)
        self.entries[name] = new
        await self.store.save_worker(WorkerIdentity(name, token))
        return token

    def detach(self, name: str) -> WorkerEntry:
        """An operator forgets ``name``: its stream closes; losing what it holds is the caller's."""
        entry = self.entries.get(name)
        if entry is None:
            raise NotFound(f"worker {name!r} is not registered")
        if entry.session is not None:
            entry.session.close()
        return entry

    def pause(self, entry: WorkerEntry, paused: bool) -> None:
        if entry.paused == paused:
            return
        entry.paused = paused
        entry.invalidate()
        self.events.worker_paused(entry)
        log.info("worker %s %s", entry.name, "paused" if paused else "resumed")
        if not paused:
            self._passes.room_freed([entry])

    def connect(self, name: str, session_token: str, transport: str) -> Session:
        entry = self.authorize(name, session_token)
        if entry.session is not None:
            entry.session.close()  # the same worker reconnecting takes over its own stream
        session = Session(name, transport, {i: self._generation_of(i) for i in entry.holdings})
        session.on_close = lambda: self._changed.add(name)
        entry.session, entry.transport = session, transport
        entry.disconnected_at, entry.draining = None, False
        entry.ever_connected = True
        entry.invalidate()
        # Indexed now, not by the next placement: after a storm of 10,000 connects that one
        # placement rebuilt every view at once and held the loop for 230 ms.
        self._changed.discard(name)
        self._reindex(name)
        self.events.worker_connected(entry)
        self._passes.room_freed([entry])
        return session

    def disconnect(self, session: Session) -> None:
        if session.overflowed:
            log.warning(
                "worker %s stopped reading its stream; closed it, its unclaimed dispatches go back in line",
                session.worker,
            )
        session.close()
        entry = self.entries.get(session.worker)
        if entry is not None and entry.session is session:
            entry.session = None
            entry.disconnected_at = self.clock()
            entry.invalidate()
            self.events.worker_disconnected(entry)

    def report(
        self,
        name: str,
        session_token: str,
        resources: WorkerResources,
        software: WorkerSoftware | None,
        draining: bool,
    ) -> None:
        entry = self.authorize(name, session_token)
        try:
            resources.validate()
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        validation.check_software(software)
        validation.check_metadata(
            entry.labels, software or entry.software, resources, self.settings.max_worker_metadata
        )
        entry.report(resources, software)
        started_draining = draining and not entry.draining
        entry.draining = draining
        self.events.worker_reported(entry, started_draining)
        self._passes.room_freed([entry])
