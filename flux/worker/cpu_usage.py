"""How busy the machine is with work that is not this worker's: the CPU figure a report carries.

An instant reading punishes the worker twice. It catches whatever spike
happens to be running at report time, and it counts the worker's own
executions as load although the dispatcher already reserves their cores
(``free = min(observed_free, total - reserved)``, DESIGN §3): a ``cpu=1``
execution that has just finished leaves the box looking busy until the next
report, and the next ``cpu=1`` execution waits for a figure that is about
itself.

``WindowedCpu`` fixes both. It keeps cumulative counters from each sample
(host CPU seconds busy and in total, and the CPU seconds of this process and
its children) and reports usage over the last ``window`` seconds, with the
worker's own CPU subtracted from the busy time. Cumulative counters make the
figure independent of which thread samples (psutil's ``cpu_percent`` keeps a
baseline per thread) and cost nothing between samples.

The reading it replaces, ``psutil.cpu_percent`` since the previous sample,
is this with a zero window and the worker's own time not told apart, which is
how ``python -m bench loaded`` measures the two side by side.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

# Long enough to smooth a burst, short enough that load which started a few
# seconds ago is seen: workers report every 2 s, so a window spans 2-3 samples.
CPU_WINDOW_SECONDS = 5.0
# psutil documents 0.1 s as the shortest window that gives a meaningful percentage.
CPU_SAMPLE_SECONDS = 0.1


class CpuObserver(Protocol):
    def busy_fraction(self) -> float:
        """Fraction of the machine's CPU busy with load that is not the worker's own, 0.0 to 1.0."""
        ...


@dataclass(frozen=True, slots=True)
class Counters:
    """Cumulative CPU seconds: the host's in total (all cores), its busy part, and this worker's."""

    total: float
    busy: float
    own: float


class CounterSource(Protocol):
    def read(self) -> Counters: ...


class PsutilCounters:
    """Counters from psutil: ``cpu_times()`` for the host, this process and its children for the worker.

    The worker's own time is its process's user and system time, the time of
    the children it has reaped, and that of every live descendant (an
    execution that shells out to a compiler is the worker's work too).
    """

    def __init__(self, psutil_module: Any) -> None:
        self._psutil = psutil_module
        self._process: Any = None

    def read(self) -> Counters:
        if self._process is None:
            self._process = self._psutil.Process()
        times = self._psutil.cpu_times()
        fields = times._asdict()
        # guest time is already counted in user/nice on Linux; counting it twice overstates busy.
        total = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
        idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0)
        return Counters(total=total, busy=total - idle, own=self._own())

    def _own(self) -> float:
        seconds = _process_seconds(self._process)
        try:
            children = self._process.children(recursive=True)
        except self._psutil.Error:
            children = []
        for child in children:
            try:
                seconds += _process_seconds(child)
            except self._psutil.Error:
                continue  # ended between listing and reading; its parent's reaped total picks it up
        return seconds


def _process_seconds(process: Any) -> float:
    t = process.cpu_times()
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


class WindowedCpu:
    """Foreign CPU usage averaged over the last ``window`` seconds of samples.

    Each call records the counters and measures against the newest earlier
    record at least ``window`` old (the oldest one while the worker is
    younger than that). The first call has nothing to compare with, so it
    waits ``minimum`` seconds once for a real figure. Thread-safe: the runtime
    samples from its report thread and from the event loop.
    """

    def __init__(
        self,
        counters: CounterSource,
        window: float = CPU_WINDOW_SECONDS,
        *,
        minimum: float = CPU_SAMPLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._counters = counters
        self.window = window
        self._minimum = minimum
        self._clock = clock
        self._sleep = sleep
        self._records: deque[tuple[float, Counters]] = deque()
        self._last = 0.0
        self._lock = threading.Lock()

    def busy_fraction(self) -> float:
        with self._lock:
            if not self._records:
                self._records.append((self._clock(), self._counters.read()))
                self._sleep(self._minimum)
            elif self._clock() - self._records[-1][0] < self._minimum:
                # The worker samples after every execution; a burst of them would otherwise
                # walk the process table each time for a figure that cannot have moved.
                return self._last
            now, current = self._clock(), self._counters.read()
            # Drop records older than the newest one that still covers the whole window.
            while len(self._records) > 1 and self._records[1][0] <= now - self.window:
                self._records.popleft()
            _, base = self._records[0]
            self._records.append((now, current))
            self._last = foreign_fraction(base, current)
            return self._last


def foreign_fraction(base: Counters, current: Counters) -> float:
    """Busy time not spent by the worker, as a fraction of all CPU time between two readings."""
    total = current.total - base.total
    if total <= 0:
        return 0.0
    busy = current.busy - base.busy
    # A child that ends unreaped takes its time with it, so the worker's counter can step
    # back; never count that as negative own time.
    own = max(0.0, current.own - base.own)
    return min(1.0, max(0.0, (busy - own) / total))


class SimulatedCpu:
    """Foreign load described rather than measured: ``FLUX_SIMULATED_CPU_BUSY=0.25``.

    Like ``FLUX_SIMULATED_GPUS``: for demos, benchmarks and integration tests on a
    shared machine, where what other processes do would decide whether a worker
    ever shows all of its cores free.
    """

    ENV = "FLUX_SIMULATED_CPU_BUSY"

    def __init__(self, spec: str) -> None:
        try:
            value = float(spec)
        except ValueError:
            value = -1.0
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{self.ENV} must be a fraction from 0 to 1, e.g. 0 or 0.25; got {spec!r}")
        self._busy = value

    def busy_fraction(self) -> float:
        return self._busy
