"""The dispatcher's pools: declarations kept in the store, shapes learned from workers, demand.

``PoolBook`` holds what is not in the fleet itself: the declared pools (the
store keeps them, so a pool can start from zero after a restart) and the last
shape learned from each pool's workers (an undeclared pool keeps its shape
while it has no worker, for as long as this server runs). ``demand`` reads the
fleet and the pending queue in one synchronous step and hands them to the
pure ``compute_demand``.

``watch`` is for KEDA's ``StreamIsActive``: a listener on the fleet feed marks
demand stale on any queue or fleet change, and one recomputation per event
loop turn (however many submissions arrived in it) wakes the watchers.
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
    from flux.store.base import Store

log = logging.getLogger("flux.dispatcher")

# Seconds between two recomputations for the watchers (StreamIsActive): well under KEDA's
# 50 ms push target, while a submission burst costs one computation per interval.
MIN_INTERVAL = 0.01
# Seconds a server trusts the declarations it read: with replicas, one applied on another is
# seen within this (a single server has them all in memory already; the read is cheap).
RELOAD = 2.0


class PoolBook:
    def __init__(self, dispatcher: Handle):
        self._dispatcher = dispatcher
        self.store: Store = dispatcher.store
        self.declared: dict[str, PoolSpec] = {}
        self.learned: dict[str, PoolSpec] = {}
        self._cache = FeasibilityCache()
        # StreamIsActive watchers: each is called with the fresh demand once per recomputation.
        self._watchers: list[Callable[[dict[str, PoolDemand]], None]] = []
        self._unsubscribe: Callable[[], None] | None = None
        self._scheduled = False
        self._task: asyncio.Task[None] | None = None
        self._last = float("-inf")  # loop time of the last recomputation
        self._loaded_at = float("-inf")  # loop time of the last read of the declarations

    async def load(self) -> None:
        """Read the declarations from the store (at start, and every ``RELOAD`` seconds after:
        with replicas, another one may have applied some)."""
        self._loaded_at = asyncio.get_running_loop().time()
        for name, document in await self.store.list_pools():
            try:
                self.declared[name] = parse_pool(json.loads(document), f"stored pool {name!r}")
            except (ValueError, TypeError) as exc:  # written by a newer Flux, or by hand
                log.warning("ignoring stored pool %s: %s", name, exc)

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
        return list(specs)

    # ----------------------------------------------------------------- demand

    def demand_now(
        self, entries: Sequence[WorkerEntry], pending: Sequence[tuple[Shape, int]]
    ) -> dict[str, PoolDemand]:
        """Demand per pool over these workers and pending shapes (one synchronous step)."""
        views = [entry.view() for entry in entries if entry.accepting]
        for view in sorted(views, key=lambda v: v.name, reverse=True):  # the first by name wins
            pool = pool_of(view)
            if pool:
                self.learned[pool] = learned(pool, view)
        specs = merge_specs(self.declared.values(), self.learned.values())
        return compute_demand(specs, views, pending, self._cache)

    async def refresh(self) -> None:
        """Re-read the declarations when they are older than ``RELOAD`` seconds."""
        if asyncio.get_running_loop().time() - self._loaded_at > RELOAD:
            await self.load()

    async def demand(self, dispatcher: Handle) -> dict[str, PoolDemand]:
        await self.refresh()
        entries = await dispatcher.fleet_workers()
        queue = dispatcher.pending()
        return self.demand_now(entries, [(shape, queue.count(shape)) for shape in queue.shapes()])

    async def get(self, dispatcher: Handle, name: str) -> PoolDemand:
        demand = await self.demand(dispatcher)
        found = demand.get(name)
        if found is None and name not in self.declared:  # applied through another replica just now?
            await self.load()
            demand = await self.demand(dispatcher)
            found = demand.get(name)
        if found is None:
            known = ", ".join(sorted(demand)) or "none yet"
            raise NotFound(f"pool {name!r} is neither declared nor has a worker (pools: {known})")
        return found

    def could_run(self, shape: Shape, demand: dict[str, PoolDemand]) -> str:
        """Explain's addition for work no connected worker can run: ``pool a100 could run it (0 workers)``."""
        return could_run_text(could_run(shape, demand.values(), self._cache))

    # ----------------------------------------------------------------- watching

    def watch(self, listener: Callable[[dict[str, PoolDemand]], None]) -> Callable[[], None]:
        """Call ``listener`` with fresh demand whenever the queue or fleet changed; returns stop."""
        self._watchers.append(listener)
        if self._unsubscribe is None:
            self._unsubscribe = self._dispatcher.events.fleet.subscribe(self._on_change)

        def stop() -> None:
            if listener in self._watchers:
                self._watchers.remove(listener)
            if not self._watchers and self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None

        return stop

    def _on_change(self, change: Change, subject: Any) -> None:
        self.changed()

    def changed(self) -> None:
        """Demand may differ: recompute once, after whatever else this event-loop turn does.

        At most once per ``MIN_INTERVAL``: a burst of submissions costs one computation
        (3 ms at 10,000 pending over 100 pools, bench/pools.py) per interval, not one per turn.
        """
        if self._scheduled or not self._watchers:
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
        try:
            demand = await self.demand(self._dispatcher)
        except Exception:  # a replica's database hiccup: the next change or poll tries again
            log.exception("pool demand could not be computed")
            return
        for listener in tuple(self._watchers):
            listener(demand)
