"""How long the server's event loop stalls, and how much of that is garbage collection.

Off unless ``FLUX_LOOP_PROBE`` names a file (the fleet bench sets it). Then two
sources feed one record, rewritten to that file twice a second:

- a task that sleeps ``STEP`` seconds at a time and records how late it woke
  (the loop's longest pause: a slow callback, a long tick, a collection);
- ``gc.callbacks``, timing every collection by generation.

Each duration comes with the CPU time the loop's thread spent in it: on a
shared machine a pause with little CPU behind it is the process waiting for a
core, not the server doing work.

The probe's own wake-ups cost an idle server about 3% of a core here, so it
rests on ``SIGUSR1`` (no wake-ups, no writes) and resumes on ``SIGUSR2``: the
fleet bench measures idle CPU with it resting.

Each sample carries its wall-clock time so a reader can keep its own window.
Only pauses above ``LAG_FLOOR`` are kept (bounded), so an idle probe costs a
wake-up every few milliseconds and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import time
from collections import deque
from pathlib import Path

ENV = "FLUX_LOOP_PROBE"
STEP = 0.005
LAG_FLOOR = 0.002
KEEP = 20_000


class LoopProbe:
    def __init__(self, path: Path):
        self.path = path
        # (wall time, seconds late, thread CPU seconds meanwhile) of each wake-up later than LAG_FLOOR.
        self.lags: deque[tuple[float, float, float]] = deque(maxlen=KEEP)
        # (wall time, generation, seconds, thread CPU seconds, objects collected) of every collection.
        self.collections: deque[tuple[float, int, float, float, int]] = deque(maxlen=KEEP)
        self._gc_started = (0.0, 0.0)
        self._task: asyncio.Task[None] | None = None
        self._awake = asyncio.Event()
        self._awake.set()

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = (time.perf_counter(), time.thread_time())
        else:
            took, cpu = time.perf_counter() - self._gc_started[0], time.thread_time() - self._gc_started[1]
            self.collections.append((time.time(), info["generation"], took, cpu, info.get("collected", 0)))

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run())
        loop.add_signal_handler(signal.SIGUSR1, self._awake.clear)
        loop.add_signal_handler(signal.SIGUSR2, self._awake.set)

    async def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGUSR1, signal.SIGUSR2):
            loop.remove_signal_handler(signum)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._write()

    async def _run(self) -> None:
        last_write = time.perf_counter()
        while True:
            if not self._awake.is_set():
                await self._awake.wait()
            before, cpu_before = time.perf_counter(), time.thread_time()
            await asyncio.sleep(STEP)
            after = time.perf_counter()
            late = after - before - STEP
            if late > LAG_FLOOR:
                self.lags.append((time.time(), late, time.thread_time() - cpu_before))
            if after - last_write >= 0.5:
                last_write = after
                self._write()

    def _write(self) -> None:
        record = {
            "pid": os.getpid(),
            "lags": list(self.lags),
            "collections": [c for c in self.collections if c[1] == 2 or c[2] > LAG_FLOOR],
        }
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record))
        temporary.replace(self.path)


def from_environment() -> LoopProbe | None:
    path = os.environ.get(ENV)
    return LoopProbe(Path(path)) if path else None
