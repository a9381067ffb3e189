"""A sync body with a time limit runs here, in a child process of the worker.

A Python function that does not return cannot be stopped from another thread; the one sure stop is
to end the process it runs in. So a sync workflow whose attempt has a timeout (or a heartbeat
timeout) is run by ``python -m flux.worker.child``: the worker kills it when the server stops the
attempt, and only then hands the attempt back, so its room is never given to other work while it
still runs. Async bodies stay in the worker and are stopped by cancellation.

Protocol: the job as JSON in a file the worker wrote and names as the one argument (the workflow's
file, the entrypoint, the context's fields, the heartbeat interval); JSON lines back on the process's
original stdout: ``["started"]`` once the workflow's module is loaded, just before the body is
called, then ``["beat", details_json]`` at most once per interval (the latest details win), then
``["ok", output_json]`` or ``["error", type, message, traceback, bases]``. The body's own prints go
to stderr, so they never mix with the protocol.

``started``: starting Python and importing Flux and the workflow's module can take seconds on a
loaded machine, all counted against a heartbeat window the server started at the claim. Until it
comes the worker heartbeats for this process (without details), and answers it with one more, so
the window counts from the body's start.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
import types
from typing import Any, TextIO


class _Beats:
    """Coalesces ``ctx.heartbeat`` calls: at most one line per interval, the latest details win."""

    def __init__(self, out: TextIO, lock: threading.Lock, interval: float):
        self.out, self.lock, self.interval = out, lock, max(0.05, interval)
        self.latest: str | None = None
        self.sent_at = 0.0
        self.wake = threading.Event()
        threading.Thread(target=self._flush, daemon=True).start()

    def __call__(self, details: Any) -> None:
        self.latest = json.dumps(details)
        if time.monotonic() - self.sent_at >= self.interval:
            self._send()

    def _send(self) -> None:
        details, self.latest = self.latest, None
        if details is None:
            return
        self.sent_at = time.monotonic()
        with self.lock:
            self.out.write(json.dumps(["beat", details]) + "\n")
            self.out.flush()

    def _flush(self) -> None:
        while True:  # what a tight loop coalesced is sent within an interval, even if it then goes quiet
            time.sleep(self.interval)
            self._send()


def main() -> None:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the body's prints go to the worker's stderr, never into the protocol
    sys.stdout = sys.stderr
    lock = threading.Lock()
    with open(sys.argv[1], encoding="utf-8") as file:  # the job, written by the worker
        job = json.load(file)
    os.unlink(sys.argv[1])

    def answer(*item: object) -> None:
        with lock:
            out.write(json.dumps(list(item)) + "\n")
            out.flush()

    try:
        from flux.context import ExecutionContext

        path = job["path"]
        module = types.ModuleType(job["module"])
        module.__file__ = path
        sys.modules[module.__name__] = module  # dataclasses and pickling in user code look here
        with open(path, encoding="utf-8") as source:
            exec(compile(source.read(), path, "exec"), module.__dict__)
        fn = getattr(module, job["entrypoint"])
        beat = _Beats(out, lock, job["interval"])
        ctx = ExecutionContext(**job["context"], _beat=beat)
        answer("started")
        result = fn(ctx)
        beat._send()  # the latest details, before the result
        answer("ok", json.dumps(result, allow_nan=False))
    except Exception as exc:
        bases = [k.__name__ for k in type(exc).__mro__[1:] if k is not object]
        answer("error", type(exc).__qualname__, str(exc), traceback.format_exc(), bases)


if __name__ == "__main__":
    main()
