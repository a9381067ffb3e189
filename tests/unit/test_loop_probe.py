"""The fleet bench's loop probe (flux/observe/pauses.py): it records a stalled loop, and rests on SIGUSR1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

from flux.observe.pauses import LoopProbe


async def _stall(seconds: float) -> None:
    await asyncio.sleep(0.02)  # the probe is asleep in its step
    time.sleep(seconds)  # blocks the loop, as a slow callback would
    await asyncio.sleep(0.05)  # the probe wakes late and records it


async def test_a_stalled_loop_is_recorded_except_while_the_probe_rests(tmp_path: Path) -> None:
    probe = LoopProbe(tmp_path / "probe.json")
    probe.start()
    try:
        await _stall(0.06)
        assert max(late for _, late, _ in probe.lags) >= 0.04

        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.sleep(0.05)  # the handler runs, the probe finishes its step and rests
        recorded = len(probe.lags)
        await _stall(0.06)
        assert len(probe.lags) == recorded

        os.kill(os.getpid(), signal.SIGUSR2)
        await asyncio.sleep(0.02)
        await _stall(0.06)
        assert len(probe.lags) > recorded
    finally:
        await probe.stop()
    record = json.loads((tmp_path / "probe.json").read_text())
    assert record["pid"] == os.getpid() and record["lags"]
