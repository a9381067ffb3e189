"""The dispatcher's pools: declarations kept in the store, shapes learned from workers, demand.

``PoolBook`` holds what is not in the fleet itself: the declared pools (the
store keeps them, so a pool can start from zero after a restart) and the last
shape learned from each pool's workers (an undeclared pool keeps its shape
while it has no worker, for as long as this server runs). ``demand`` reads the
fleet and the pending queue in one synchronous step and hands them to the
pure ``compute_demand``.

``subscribe`` is for KEDA's ``StreamIsActive``: a listener on the fleet feed
marks demand stale on any queue or fleet change, and one recomputation per
``MIN_INTERVAL`` (however many submissions arrived in it, however many streams
are open) updates the last ``active`` of each subscribed pool and calls only
the subscribers of the pools whose ``active`` flipped. A stream costs nothing
while its pool's answer holds: 3,000 open streams on busy pools are not 3,000
wake-ups per submission burst (issue 40). One timer per book, not per stream,
recomputes every ``REFRESH`` seconds for what no local event announces (work
submitted through another replica), and that recomputation is also the slow
re-read of the declarations (at most one per ``RELOAD`` seconds, shared).

``known`` answers whether a pool exists from memory only: an unknown name
costs neither a store read nor a demand computation, however often it is asked.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from flux.errors import InvalidArgument, NotFound
from flux.matching import FeasibilityCache, Shape
from flux.matching.pools import (
    POOL_LABEL,
    RETRY_SOON,
    PoolDemand,
    PoolSpec,
    compute_demand,
    could_run,
    could_run_text,
    learned,
    merge_specs,
    parse_pool,
    pool_of,
)

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.dispatcher.state.worker_entry import WorkerEntry
    from flux.observe.fleet import Change
    from flux.store import Store

log = logging.getLogger("flux.dispatcher")

# Seconds between two recomputations for the watchers (StreamIsActive): well under KEDA's
# 50 ms push target, while a submission burst costs one computation per interval.
MIN_INTERVAL = 0.01
# Seconds a server trusts the declarations it read: with replicas, one applied on another is
# seen within this (a single server has them all in memory already; the read is cheap).
RELOAD = 2.0
# Seconds between recomputations for the subscribers when nothing changed here (another
# replica's submissions reach this one's queue through the shared feed, not its fleet feed).
REFRESH = 5.0


class PoolBook:
    def __init__(self, dispatcher: Handle):
        self._dispatcher = dispatcher
        self.store: Store = dispatcher.store
        self.declared: dict[str, PoolSpec] = {}
        self.learned: dict[str, PoolSpec] = {}
        self._cache = FeasibilityCache()
        # StreamIsActive subscribers per pool, and the pool's ``active`` they were last told.
        self._subscribers: dict[str, set[Callable[[bool], None]]] = {}
        self._active: dict[str, bool] = {}
        self._unsubscribe: Callable[[], None] | None = None
        self._scheduled = False
        self._task: asyncio.Task[None] | None = None
        self._refresher: asyncio.TimerHandle | None = None
        self._last = float("-inf")  # loop time of the last recomputation
        self._loaded_at = float("-inf")  # loop time of the last read of the declarations
        self._loading: asyncio.Future[None] | None = None  # the re-read in flight, shared by its callers
        # Counters for tests and the bench: store reads of the declarations, demand computations
        # (any caller), and the recomputations done for subscribers.
        self.reads = 0
        self.computations = 0
        self.recomputations = 0
        # Told when the declarations change (applied here, or re-read): --infeasible-after's evaluation.
        self.on_declared: Callable[[], None] | None = None

    async def load(self) -> None:
        """Read the declarations from the store (at start, and every ``RELOAD`` seconds after:
        with replicas, another one may have applied some)."""
        self._loaded_at = asyncio.get_running_loop().time()
        self.reads += 1
        before = dict(self.declared)
        for name, document in await self.store.list_pools():
            try:
                self.declared[name] = parse_pool(json.loads(document), f"stored pool {name!r}")
            except (ValueError, TypeError) as exc:  # written by a newer Flux, or by hand
                log.warning("ignoring stored pool %s: %s", name, exc)
        if self.on_declared is not None and self.declared != before:
            self.on_declared()

    async def apply(self, specs: Sequence[PoolSpec]) -> list[PoolSpec]:
        """Declare or replace pools (by name), durably; all of them or none."""
        if not specs:
            raise InvalidArgument("pools must list at least one pool")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise InvalidArgument(
                f"pools names a pool twice: {sorted(n for n in names if names.count(n) > 1)[0]!r}"
            )
        await self.store.save_pools([(s.name, json.dumps(s.to_document(), sort_keys=True)) for s in specs])
        for spec in specs:
            self.declared[spec.name] = spec
        self.changed()
        if self.on_declared is not None:
            self.on_declared()
        return list(specs)

    # ----------------------------------------------------------------- demand

    def demand_now(
        self, entries: Sequence[WorkerEntry], pending: Sequence[tuple[Shape, int]]
    ) -> dict[str, PoolDemand]:
        """Demand per pool over these workers and pending shapes (one synchronous step)."""
        self.computations += 1
        soon = self._dispatcher.retrying_soon(RETRY_SOON)
        if soon:  # retries due shortly count as pending (matching/pools/demand.py)
            counts = dict(pending)
            for shape, count in soon.items():
                counts[shape] = counts.get(shape, 0) + count
            pending = list(counts.items())
        views = [entry.view() for entry in entries if entry.accepting]
        for view in sorted(views, key=lambda v: v.name, reverse=True):  # the first by name wins
            pool = pool_of(view)
            if pool:
                self.learned[pool] = learned(pool, view)
        specs = merge_specs(self.declared.values(), self.learned.values())
        return compute_demand(specs, views, pending, self._cache)

    async def refresh(self) -> None:
        """Re-read the declarations when they are older than ``RELOAD`` seconds.

        Callers arriving while a re-read is in flight wait for that one: many concurrent KEDA
        calls on a replica make one query, not one each."""
        if self._loading is not None:
            await asyncio.shield(self._loading)
            return
        if asyncio.get_running_loop().time() - self._loaded_at <= RELOAD:
            return
        self._loading = asyncio.ensure_future(self.load())
        try:
            await asyncio.shield(self._loading)
        finally:
            self._loading = None

    def known(self, name: str) -> bool:
        """Whether ``name`` is a pool here, from memory: declared, learned from a worker, or the
        pool of a worker connected here (O(workers) on a miss; no store, no demand computation).
        A pool only another replica's workers are in is learned by this one's next computation."""
        if name in self.declared or name in self.learned:
            return True
        return any(
            entry.accepting and entry.labels.get(POOL_LABEL) == name
            for entry in self._dispatcher.registry.values()
        )

    async def demand(self, dispatcher: Handle) -> dict[str, PoolDemand]:
        await self.refresh()
        entries = await dispatcher.fleet_workers()
        queue = dispatcher.pending()
        return self.demand_now(entries, [(shape, queue.count(shape)) for shape in queue.shapes()])

    async def get(self, dispatcher: Handle, name: str) -> PoolDemand:
        """One pool's demand. An unknown name is refused from memory, before any computation: the
        declarations come from the slow re-read (``refresh``), never from a read per miss."""
        await self.refresh()
        self.require(name)
        found = (await self.demand(dispatcher)).get(name)
        if found is None:  # its last worker left between the check and the computation
            raise self._unknown(name)
        return found

    def require(self, name: str) -> None:
        if not self.known(name):
            raise self._unknown(name)

    @staticmethod
    def _unknown(name: str) -> NotFound:
        # Only the name asked for: the KEDA port answers without a token, so no list of pools.
        return NotFound(
            f"pool {name!r} is neither declared nor has a worker (flux pool list shows the pools)"
        )

    def could_run(self, shape: Shape, demand: dict[str, PoolDemand]) -> str:
        """Explain's addition for work no connected worker can run: ``pool a100 could run it (0 workers)``."""
        return could_run_text(could_run(shape, demand.values(), self._cache))

    # ----------------------------------------------------------------- subscribing

    async def subscribe(self, name: str, listener: Callable[[bool], None]) -> tuple[bool, Callable[[], None]]:
        """``name``'s ``active`` now, and a stop; ``listener`` is then called with each flip of it.

        The answer now is the one the book last computed for the pool when it already has
        subscribers (any change since is on its way to them, and so to this one), and one
        computation otherwise. Unknown pools are refused (``NotFound``) before anything is kept.
        """
        await self.refresh()
        self.require(name)
        subscribers = self._subscribers.setdefault(name, set())
        subscribers.add(listener)
        if self._unsubscribe is None:
            self._unsubscribe = self._dispatcher.events.fleet.subscribe(self._on_change)
            self._schedule_refresh()

        def stop() -> None:
            subscribers.discard(listener)
            if not subscribers and self._subscribers.get(name) is subscribers:
                del self._subscribers[name]
                self._active.pop(name, None)
            if not self._subscribers and self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None
                if self._refresher is not None:
                    self._refresher.cancel()
                    self._refresher = None

        if name not in self._active:
            try:
                found = (await self.demand(self._dispatcher)).get(name)
            except BaseException:
                stop()
                raise
            self._active.setdefault(name, found is not None and found.active)
        return self._active[name], stop

    def _schedule_refresh(self) -> None:
        self._refresher = asyncio.get_running_loop().call_later(REFRESH, self._refresh_tick)

    def _refresh_tick(self) -> None:
        if self._unsubscribe is None:  # the last subscriber left
            return
        self._schedule_refresh()
        self.changed()

    def _on_change(self, change: Change, subject: Any) -> None:
        self.changed()

    def changed(self) -> None:
        """Demand may differ: recompute once, after whatever else this event-loop turn does.

        At most once per ``MIN_INTERVAL``: a burst of submissions costs one computation
        (3 ms at 10,000 pending over 100 pools, bench/pools.py) per interval, not one per turn
        nor one per stream.
        """
        if self._scheduled or not self._subscribers:
            return
        self._scheduled = True
        loop = asyncio.get_running_loop()
        wait = self._last + MIN_INTERVAL - loop.time()
        if wait > 0:
            loop.call_later(wait, self._start_recompute)
        else:
            loop.call_soon(self._start_recompute)

    def _start_recompute(self) -> None:
        self._task = asyncio.ensure_future(self._recompute())

    async def _recompute(self) -> None:
        self._scheduled = False
        self._last = asyncio.get_running_loop().time()
        self.recomputations += 1
        try:
            demand = await self.demand(self._dispatcher)
        except Exception:  # a replica's database hiccup: the next change or refresh tries again
            log.exception("pool demand could not be computed")
            return
        # O(subscribed pools) to compare, then only the subscribers of the pools that flipped.
        for name, subscribers in tuple(self._subscribers.items()):
            found = demand.get(name)
            active = found is not None and found.active  # a pool gone (undeclared, no worker) has no work
            if self._active.get(name) is active:
                continue
            self._active[name] = active
            for listener in tuple(subscribers):
                listener(active)
