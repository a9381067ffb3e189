"""Sync bodies with a 2 s heartbeat window whose child process starts slowly ON PURPOSE
(test_child_start.py): the module sleeps at import, longer than the window, only in the child
process that runs a sync body (``python -m flux.worker.child``) and only where the worker's
environment names the delay. The worker that loads this module to find the function, and the
client that registers it (from its syntax tree), never sleep."""

import os
import sys
import time

from flux import ExecutionContext, Retry, workflow

_main = sys.modules.get("__main__")
if getattr(getattr(_main, "__spec__", None), "name", None) == "flux.worker.child":
    time.sleep(float(os.environ.get("FLUX_TEST_CHILD_START_DELAY", "0")))


@workflow.with_options(heartbeat_timeout="2s", max_attempts=1)
def late_beating(ctx: ExecutionContext[float]) -> int:
    """Beats every 50 ms for ``input`` seconds from its start, with its count as details."""
    deadline, beats = time.monotonic() + ctx.input, 0
    while time.monotonic() < deadline:
        beats += 1
        ctx.heartbeat(beats)
        time.sleep(0.05)
    return beats


@workflow.with_options(
    heartbeat_timeout="2s", retry=Retry(max_attempts=2, initial_delay="100ms", jitter=False)
)
def silent_once_started(ctx: ExecutionContext[None]) -> None:
    """Its first try beats once and fails; its second never beats after its start."""
    if ctx.attempt == 1:
        ctx.heartbeat({"reached": 1})
        raise ConnectionResetError("first try")
    time.sleep(60)


@workflow.with_options(timeout="30s", max_attempts=1)
def dies_in_its_child(ctx: ExecutionContext[None]) -> None:
    """Its process is killed outright mid-body (as the OOM killer would): no result ever comes."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
