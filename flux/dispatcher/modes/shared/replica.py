"""One of several server replicas sharing a PostgreSQL database: the shared strategies.

The matching is the same as on a single server (``Dispatcher``); what changes
is who may act on an execution, and that is all injected (``shared(store)``),
as the strategies of modes/local.py, in binder.py, feed.py and fleet.py beside this module:

- **Pending work is shared** (``SharedFeed``). Each replica mirrors the queue
  of CREATED rows (announced by ``NOTIFY flux_pending``, reread on every safety
  tick) and places it on *its own* workers.
- **Placements are claimed** (``SharedBinder``). A placement is reserved
  locally at once, then claimed in the database (``SELECT … FOR UPDATE SKIP
  LOCKED``); only a claimed row is sent to the worker. A row another replica
  claimed first is dropped from the mirror and the reservation is freed.
- **A worker belongs to the replica holding its stream** (``SharedFleet``),
  and so do the executions dispatched to it; that replica alone reserves the
  worker's resources, so capacity holds across replicas. A worker that
  reconnects to another replica is *adopted* there with its executions; the old
  replica hears ``NOTIFY flux_workers`` and lets go. Every replica publishes its
  workers to the database directory, so each sees (explains against, counts in
  status) the whole fleet.
- **Writes are guarded.** A write to an owned row that someone else changed
  fails with ``Conflict``, and this replica drops the execution
  (``transitions.cancel.drop_stale``, through the table's one save path).
- **Dead replicas are swept.** Replicas heartbeat; one live replica at a time
  requeues the work of replicas silent for longer than the grace period.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from flux.dispatcher.handle import Modes
from flux.dispatcher.modes.shared.background import Background
from flux.dispatcher.modes.shared.binder import SharedBinder
from flux.dispatcher.modes.shared.feed import SharedFeed
from flux.dispatcher.modes.shared.fleet import SharedFleet

if TYPE_CHECKING:
    from flux.store import SharedStore

log = logging.getLogger("flux.replica")


def shared(store: SharedStore) -> Modes:
    """The strategies of one replica among several on ``store``'s database.

    Any ``SharedStore`` (flux/store/shared.py): PostgreSQL when serving, an in-memory one in unit tests.
    """
    tasks = Background()
    binder = SharedBinder(store, tasks)
    fleet = SharedFleet(store, tasks, binder)
    return Modes(binder, SharedFeed(store, tasks, binder, fleet), fleet)
