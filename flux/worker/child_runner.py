"""The parent's side of a sync body run in its own process (``python -m flux.worker.child``): the
job given as a file, its start, heartbeats and result read back, the process killed if stopped. Its
own module since it is the one place the worker spawns a process; executions.py only calls it.

The job reaches the child as a temporary file named on its command line, not through a pipe or a
descriptor the worker hands over: under uvloop a stdin pipe written right after the spawn was now
and then already closed on our side ("unable to perform operation on <WriteUnixTransport
closed=True>"), and a file passed as stdin now and then reached the child empty, each failing the
attempt with an error that was never the body's. A named file is complete before the child starts
and shares nothing with the worker's descriptors.

The child is spawned by ``subprocess`` (``vfork`` then ``exec``), not by the event loop's own
spawn, which forks: a fork runs the handlers gRPC registers for it in a process whose other
threads are inside gRPC, and now and then the child died of a segmentation fault before it ran
a line of Python (exit -11 within 36 ms, in a fresh-clone CI run). ``vfork`` runs no fork
handlers. Its stdout is read on the loop, and its exit is waited for on a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

from flux.context import ExecutionContext
from flux.domain.execution import ExecutionError
from flux.worker.heartbeats import Heartbeats


async def in_child(
    fn: Callable[..., object], ctx: ExecutionContext[object], beats: Heartbeats
) -> tuple[str | None, ExecutionError | None]:
    """Run a sync body in ``python -m flux.worker.child``; killed if this task is cancelled."""
    module = inspect.getmodule(fn)
    path = getattr(module, "__file__", None)
    if module is None or path is None:
        return None, ExecutionError("WorkflowCodeError", "the workflow's file could not be found to run it")
    job = {
        "path": path,
        "module": module.__name__,
        "entrypoint": fn.__name__,
        "interval": beats.interval,
        "context": {
            "input": ctx.input,
            "execution_id": ctx.execution_id,
            "workflow_name": ctx.workflow_name,
            "worker_name": ctx.worker_name,
            "attempt": ctx.attempt,
            "assigned_gpus": list(ctx.assigned_gpus),
            "last_heartbeat": ctx.last_heartbeat,
            "upstream": ctx.upstream,
        },
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="flux-job-", delete=False) as file:
        json.dump(job, file)
    loop = asyncio.get_running_loop()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "flux.worker.child", file.name],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, close_fds=True,
        )  # fmt: skip
    except BaseException:
        os.unlink(file.name)
        raise
    assert process.stdout is not None
    stdout = asyncio.StreamReader(limit=64 << 20)
    transport = None
    beats.starting()
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stdout), process.stdout
        )
        answer = await answers(stdout, beats)
        if answer is None:
            code = await loop.run_in_executor(None, process.wait)
            return None, ExecutionError(
                "ChildProcessError", f"the body's process ended without a result (exit {code})"
            )
        return answer
    finally:
        if process.poll() is None:
            process.kill()  # stopped (cancelled) or done: never leave the body running
            await asyncio.shield(loop.run_in_executor(None, process.wait))
        if transport is not None:
            transport.close()
        process.stdout.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(file.name)  # the child removes it once read; here if it never got that far


async def answers(
    stdout: asyncio.StreamReader, beats: Heartbeats
) -> tuple[str | None, ExecutionError | None] | None:
    """The child's lines (child.py's protocol) until its result; None if it ended without one.

    ``started`` ends the heartbeats the worker sends while the child starts (``beats.starting``)
    with one more: the body's heartbeat window counts from its start.
    """
    while True:
        line = await stdout.readline()
        if not line:
            return None
        item = json.loads(line)
        if item[0] == "started":
            beats.started()
        elif item[0] == "beat":
            beats.raw_beat(item[1])
        elif item[0] == "ok":
            return item[1], None
        else:
            return None, ExecutionError(item[1], item[2], item[3], tuple(item[4]))
