"""The dispatcher's registry entry for one worker: what it offers and what it holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

from flux.dispatcher.state.session import Session
from flux.domain.resource_request import ResourceRequest
from flux.domain.worker import WorkerResources, WorkerSoftware
from flux.matching import Amounts, Profile, Shape, WorkerView
from flux.matching.aging import BookedRoom
from flux.matching.filters import fits_now
from flux.matching.prefetch import queue_depth

# The weight of a worker's latest body in its moving average (``WorkerEntry.ran``).
BODY_WEIGHT = 0.3


def _amounts(requests: ResourceRequest) -> Amounts:
    return Amounts(requests.cpu, requests.memory, requests.disk)


@dataclass(slots=True)
class Holding:
    """One execution's reservation on a worker."""

    amounts: Amounts
    gpus: tuple[int, ...]
    # Taken after the latest report, so part of ``unreported``.
    since_report: bool = True


@dataclass(frozen=True, slots=True)
class Queued:
    """One execution in a pipelining worker's own queue: what it will reserve, and its priority."""

    requests: ResourceRequest
    priority: int
    # When it was queued here (a worker with free room may take it after a while: ``moves``).
    since: float = 0.0


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """A worker whose stream another replica holds, as that replica last published it."""

    replica: str
    active: int
    held_gpus: frozenset[int]


@dataclass(eq=False, slots=True)
class WorkerEntry:
    name: str
    session_token: str
    labels: MappingProxyType[str, str]
    capacity: int
    resources: WorkerResources
    software: WorkerSoftware
    transport: str = "grpc"
    # Where gang members reach it: its ``--advertise-address``, else the host it registered from.
    address: str = ""
    session: Session | None = None
    draining: bool = False
    # Paused by an operator (flux worker pause): keeps its stream and its work, takes nothing new.
    paused: bool = False
    # Set while the stream is gone; the grace period runs from here.
    disconnected_at: float | None = None
    # Last sign of life: a call with its session token, or (refreshed each housekeeping step)
    # an open dispatch stream, which keepalive pings would have closed if the worker were gone.
    last_seen: float = 0.0
    # False until the first Connect: a worker that registers and never streams is forgotten quietly.
    ever_connected: bool = False
    holdings: dict[str, Holding] = field(default_factory=dict)
    # Executions it may hold beyond its room in its own queue (--prefetch), and those it holds
    # there, in the order sent (SCHEDULED, nothing reserved until its claim: ``claim_queued``).
    prefetch: int = 0
    queued: dict[str, Queued] = field(default_factory=dict)
    # Its recent bodies' seconds, claim to result by this server's clock (a moving average: ``ran``);
    # None until its first result. How deep its queue goes follows it (``depth``).
    body_s: float | None = None
    reserved: Amounts = Amounts()
    # Reserved after the latest report, which the observed values cannot reflect yet.
    unreported: Amounts = Amounts()
    # Only on entries built for a listing of the whole fleet; such entries are never dispatched to.
    elsewhere: Elsewhere | None = None
    _view: WorkerView | None = None
    # Its views' profile as the fleet index files it (``FleetIndex.put``); None after a report
    # that changed its totals or its software: the next view builds it again.
    profile: Profile | None = None
    # Told of every change to what ``view`` shows or to ``dispatchable`` (the registry's index).
    on_change: Callable[[WorkerEntry], None] | None = None
    # Told of every reservation taken and given back (flux.dispatcher.state.quotas: tenants' usage).
    on_hold: Callable[[str, ResourceRequest], None] | None = None
    on_release: Callable[[str], None] | None = None

    @property
    def connected(self) -> bool:
        return self.elsewhere is not None or (self.session is not None and not self.session.closed)

    @property
    def accepting(self) -> bool:
        """Connected and not draining: it would take work unless paused (explain shows why not)."""
        return self.connected and not self.draining

    @property
    def dispatchable(self) -> bool:
        """Work may be placed here now: only on a worker whose stream this server holds."""
        return self.elsewhere is None and self.accepting and not self.paused

    @property
    def depth(self) -> int:
        """How many it may hold queued now: ``prefetch`` at most, fewer while its bodies run long."""
        return queue_depth(self.prefetch, self.body_s, len(self.holdings))

    @property
    def hungry(self) -> bool:
        """Its queue has space for more: a pass may queue work ahead here."""
        return len(self.queued) < self.depth and self.dispatchable and not self.paused

    def ran(self, seconds: float) -> None:
        """One of its bodies ran ``seconds`` (claim to result). Weighted towards the latest, so a queue
        grows shallow within a few results once its bodies turn long, and deep again as they turn short."""
        seconds = max(0.0, seconds)
        self.body_s = seconds if self.body_s is None else self.body_s + BODY_WEIGHT * (seconds - self.body_s)

    def queue(self, execution_id: str, requests: ResourceRequest, priority: int, since: float = 0.0) -> None:
        """Queued ahead at this worker at ``since``: nothing is reserved."""
        self.queued[execution_id] = Queued(requests, priority, since)
        self.invalidate()

    def position(self, execution_id: str) -> int | None:
        """1 for the next to start of its queue, as the worker orders it (by priority, then as
        sent); None when not queued here."""
        if execution_id not in self.queued:
            return None
        order = sorted(enumerate(self.queued.items()), key=lambda item: (-item[1][1].priority, item[0]))
        return 1 + [queued_id for _, (queued_id, _) in order].index(execution_id)

    def claim_queued(self, execution_id: str) -> bool:
        """Its worker starts a queued execution: reserve it now if its room allows (by reservations:
        what runs here is what the worker itself counts). False, and still queued, when it does not."""
        queued = self.queued.get(execution_id)
        if queued is None:
            return False
        requests = queued.requests
        if not fits_now(Shape(requests), BookedRoom(self.view())):
            return False
        del self.queued[execution_id]
        self.hold(execution_id, requests, ())
        return True

    @property
    def active(self) -> int:
        return self.elsewhere.active if self.elsewhere is not None else len(self.holdings)

    @property
    def held_gpus(self) -> frozenset[int]:
        if self.elsewhere is not None:
            return self.elsewhere.held_gpus
        return frozenset(g for h in self.holdings.values() for g in h.gpus)

    def view(self) -> WorkerView:
        if self._view is None:
            self._view = WorkerView(
                name=self.name,
                resources=self.resources,
                labels=self.labels,
                software=self.software,
                capacity=self.capacity,
                active=self.active,
                reserved=self.reserved,
                unreported=self.unreported,
                held_gpus=self.held_gpus,
                paused=self.paused,
                queued=len(self.queued),
                known_profile=self.profile,
            )
        return self._view

    def hold(self, execution_id: str, requests: ResourceRequest, gpus: tuple[int, ...]) -> None:
        amounts = _amounts(requests)
        self.holdings[execution_id] = Holding(amounts, gpus)
        self.reserved = self.reserved + amounts
        self.unreported = self.unreported + amounts
        self.invalidate()
        if self.on_hold is not None:
            self.on_hold(execution_id, requests)

    def release(self, execution_id: str) -> bool:
        holding = self.holdings.pop(execution_id, None)
        if holding is None:
            if self.queued.pop(execution_id, None) is None:
                return False
            self.invalidate()  # its queue has space again: a pass refills it
            return True
        self.reserved = self.reserved - holding.amounts
        if holding.since_report:
            self.unreported = self.unreported - holding.amounts
        self.invalidate()
        if self.on_release is not None:
            self.on_release(execution_id)
        return True

    def report(self, resources: WorkerResources, software: WorkerSoftware | None) -> None:
        self.resources = resources
        if software is not None:
            self.software = software
        # Most reports (one rides with each batch of results) change only what is free.
        if self.profile is not None and (software is not None or not self.profile.totals_of(resources)):
            self.profile = None
        self.unreported = Amounts()
        for holding in self.holdings.values():
            holding.since_report = False
        self.invalidate()

    def invalidate(self) -> None:
        """What the view shows changed: built again when next asked for, and the index told."""
        self._view = None
        if self.on_change is not None:
            self.on_change(self)
