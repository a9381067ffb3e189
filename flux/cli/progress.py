"""``flux workflow run --wait``: run and follow an execution in one call, with one live line on a terminal.

The call runs in a thread, and so do the explain calls behind the line, so the
main thread makes no call at all: it only redraws (the elapsed time moves even
when the state does not) and waits on a join, where Ctrl-C always lands as
KeyboardInterrupt. A signal that arrives during a gRPC call on the main thread
may come back as that call's error instead, and a line that keeps its last
summary when explain fails would then swallow it. On a terminal the line shows the state, the time waited and, while
the execution is queued, its place in the queue and the explain summary; it
is erased before anything else is printed. When stderr is not a terminal nothing extra is written, so
scripts see only the output and the errors.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any, TextIO

from flux.cli.render.common import duration
from flux.cli.render.executions import queued_ahead, state_name
from flux.client import FluxClient
from flux.errors import FluxError
from flux.v1 import control_pb2

REDRAW = 0.25  # seconds between redraws of the line
EXPLAIN_EVERY = 2.0  # seconds between explain calls while the execution is queued
ERASE = "\r\x1b[2K"


class Follower:
    """Runs one execution and waits for it; ``latest`` is the last state seen, for Ctrl-C to report."""

    def __init__(self, client: FluxClient, stream: TextIO | None):
        self.client, self.stream = client, stream
        self.latest: control_pb2.Execution | None = None  # until the server accepts the run
        self._started = time.monotonic()
        self._summary = ""
        self._drawn = False

    def run(
        self,
        workflow: str,
        input_json: str,
        version: int,
        priority: int | None,
        timeout: float | None,
        policy: dict[str, Any] | None = None,
    ) -> control_pb2.Execution:
        """The final execution, from one RunAndWait call; raises what ``FluxClient.run_json``
        raises, and KeyboardInterrupt."""
        outcome: dict[str, object] = {}

        def follow() -> None:
            try:
                outcome["final"] = self.client.run_json(
                    workflow,
                    input_json,
                    version=version,
                    priority=priority,
                    wait=True,
                    timeout=timeout,
                    on_update=self._update,
                    **(policy or {}),
                )
            except BaseException as exc:  # handed to the main thread, which raises it
                outcome["error"] = exc

        thread = threading.Thread(target=follow, name="flux-wait", daemon=True)
        thread.start()
        done = threading.Event()
        if self.stream is not None:
            threading.Thread(
                target=self._explain_while_queued, args=(done,), name="flux-explain", daemon=True
            ).start()
        try:
            while thread.is_alive():
                self._draw()
                thread.join(REDRAW)
        finally:
            done.set()
            self._erase()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["final"]  # type: ignore[return-value]

    def _update(self, execution: control_pb2.Execution) -> None:
        self.latest = execution

    def _draw(self) -> None:
        latest = self.latest
        if self.stream is None or latest is None:
            return
        state = latest.state
        if state != control_pb2.EXECUTION_STATE_CREATED:
            self._summary = f"on {latest.worker}" if latest.worker else ""
        elapsed = duration(time.monotonic() - self._started)
        parts = [latest.execution_id, state_name(state), elapsed, self._summary]
        line = " · ".join(p for p in parts if p)
        width = max(20, _columns(self.stream) - 1)
        if len(line) > width:
            line = line[: width - 1] + "…"
        self.stream.write(ERASE + line)
        self.stream.flush()
        self._drawn = True

    def _explain_while_queued(self, done: threading.Event) -> None:
        """Every EXPLAIN_EVERY seconds while the execution is queued, its summary for the line."""
        while not done.is_set():
            latest = self.latest
            if latest is not None and latest.state == control_pb2.EXECUTION_STATE_CREATED:
                # On failure keep the last summary: the line is a courtesy, the wait goes on.
                with contextlib.suppress(FluxError):
                    explanation = self.client.explain(latest.execution_id, timeout=REDRAW * 4)
                    if not done.is_set() and self.latest is latest:
                        self._summary = self._queued(explanation)
                done.wait(EXPLAIN_EVERY)
            else:
                done.wait(REDRAW)

    @staticmethod
    def _queued(explanation: control_pb2.Explanation) -> str:
        if not explanation.HasField("queued_ahead"):
            return explanation.summary
        return f"{queued_ahead(explanation.queued_ahead)} · {explanation.summary}"

    def _erase(self) -> None:
        if self.stream is not None and self._drawn:
            self.stream.write(ERASE)
            self.stream.flush()
            self._drawn = False


def _columns(stream: TextIO) -> int:
    """The width of the terminal the line is drawn on (stderr's; stdout may be a pipe)."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        return 80
