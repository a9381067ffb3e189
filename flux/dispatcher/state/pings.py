"""Keepalive pings, each stream on its own schedule.

A stream is pinged once it has carried nothing for the ping interval. Checking
every stream in one housekeeping tick sent every ping of a connect storm in
the same loop step (at 5,000 workers one tick held the loop for 55-73 ms).
Here each stream sits in a heap under the time it next falls due, and a short
step (``STEP``) pings only the streams due by then, so the work follows the
streams' own clocks. A stream's first ping falls between half and one
interval after it connects, so streams opened together drift apart for good.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable

from flux.dispatcher.state.session import Ping, Session

# How often the due streams are pinged: the most a ping can come late. Each step has a fixed
# cost besides its pings: at 10,000 idle workers the server used 5.5% of a core with 0.05 s
# steps, 4.9% with 0.1 and 4.1% with 0.2, where a step's 130 pings held the loop 15 ms.
STEP = 0.1
# Pings pushed before the ping task yields to the loop. Every ping wakes its stream's writer, and a
# step's writers ran back to back: at 10,000 workers (667 pings a second, about 67 a step) the
# server's loop paused up to 7-14 ms for them, and 3.5-7 ms in turns of 8 (docs/benchmarks.md,
# "Fleet scale"; the fleet's submit -> dispatch p99 stayed where it was, so its cause lies elsewhere).
TURN = 8


class Pinger:
    def __init__(self, interval: Callable[[], float], jitter: Callable[[], float] = random.random):
        self._interval = interval
        self._jitter = jitter
        # (due, tie-break, the stream's last_sent when scheduled, the stream).
        self._due: list[tuple[float, int, float, Session]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    def watch(self, session: Session) -> None:
        """Ping ``session`` while it stays open (a closed one leaves the heap when it falls due)."""
        first = session.last_sent + self._interval() * (0.5 + 0.5 * self._jitter())
        heapq.heappush(self._due, (first, next(self._order), session.last_sent, session))

    def ping_due(self, monotonic_now: float, wall_now: float, most: int | None = None) -> int:
        """Ping the open streams due by ``monotonic_now``, at most ``most`` of them; how many were pinged.

        Fewer than ``most`` pinged means none due is left.
        """
        interval, due, pinged = self._interval(), self._due, 0
        ping = Ping(wall_now)  # one for the turn: the transport converts it once for every stream
        while due and due[0][0] <= monotonic_now and (most is None or pinged < most):
            _, _, scheduled_at, session = heapq.heappop(due)
            if session.closed:
                continue
            if session.last_sent <= scheduled_at:  # nothing sent since it was scheduled: idle, ping it
                session.push(ping)
                pinged += 1
                next_due = monotonic_now + interval
            else:
                next_due = session.last_sent + interval
            heapq.heappush(due, (next_due, next(self._order), session.last_sent, session))
        return pinged
