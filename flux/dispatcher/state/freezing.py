"""Keep the long-lived part of the heap out of full garbage collections.

A server with thousands of connected workers holds hundreds of thousands of
objects that live as long as their streams (entries, sessions, grpc call
state). Every full collection walked all of them and found nothing to free:
pauses of 50 ms at 1,000 workers and over 400 ms at 10,000. ``gc.freeze()``
moves what exists now into the permanent generation, which collections skip;
reference counting still frees those objects when they die, so only cyclic
garbage present at the moment of freezing is never reclaimed (a young
collection first keeps that small).

Frozen once the server has started; again after each connect storm, once
``STORM`` streams have connected since the last freeze and none for ``QUIET``
seconds (so a freeze never lands in the middle of a storm); and after every
full collection, whose survivors are long-lived by definition and, just
collected, hold no garbage (``watch`` hooks ``gc.callbacks`` for that; the
freeze itself waits for the next housekeeping tick, on the loop's thread).
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("flux.dispatcher")

STORM = 100
QUIET = 1.0


def freeze(why: str) -> None:
    gc.collect(1)
    gc.freeze()
    if log.isEnabledFor(logging.DEBUG):  # counting walks the whole frozen set: 35 ms at 3,000 workers
        log.debug("gc.freeze (%s): %d objects frozen", why, gc.get_freeze_count())


class Freezer:
    def __init__(self, clock=time.monotonic) -> None:  # type: ignore[no-untyped-def]
        self.clock = clock
        self.connects = 0
        self.last_connect = 0.0
        self.after_full_collection = False

    def connected(self) -> None:
        self.connects += 1
        self.last_connect = self.clock()

    def collected(self, phase: str, info: dict[str, int]) -> None:
        """A ``gc.callbacks`` entry: note that a full collection ended (any thread may run one)."""
        if phase == "stop" and info["generation"] == 2:
            self.after_full_collection = True

    def tick(self) -> bool:
        """Freeze when a storm has ended or a full collection has run; True when it froze."""
        if self.after_full_collection:
            self.after_full_collection = False
            self.connects = 0
            freeze("after a full collection")
            return True
        if self.connects < STORM or self.clock() - self.last_connect < QUIET:
            return False
        freeze(f"{self.connects} streams connected")
        self.connects = 0
        return True


def watch(freezer: Freezer) -> None:
    """Tell ``freezer`` of every full collection (for a server's lifetime; ``unwatch`` ends it)."""
    gc.callbacks.append(freezer.collected)


def unwatch(freezer: Freezer) -> None:
    if freezer.collected in gc.callbacks:
        gc.callbacks.remove(freezer.collected)
