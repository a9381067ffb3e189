"""``FluxClient.run(wait=True)`` as messages on one ``RunAndWaitStream`` call the client keeps
open, instead of a ``RunAndWait`` call per run: starting a call costs the client and the server
several times what a message does (on the peers workload, about 0.9 ms of a 5–8 ms run here).

The call is opened by the first run and kept; a daemon thread reads it and hands each answer to
the run it names, so any number of threads may run at once. When the call fails (the server
restarted, the channel closed), every run waiting on it is told, and the next run opens a new
one. A run that had its receipt when that happened is followed by ``wait``, as a broken
``RunAndWait`` is: accepted work is never submitted twice.

A wait with a timeout rides the same call (issue 46): the timeout is the client's to keep. The
run waits for its receipt up to the longer of the wait's timeout and the client's call timeout,
and for its final state until the wait's timeout has passed since it began; then it stops
waiting (``TimedOut``), the call stays open for the other runs, and a late answer for it is
dropped. The caller says where the execution stands then, as a timed-out ``wait`` does.

A run asks for its receipt only once it has gone on for ``RECEIPT_AFTER_MS`` (or its timeout,
if shorter): a run that ends sooner is answered by its final state alone, a message fewer for
the server and the client each. Its execution id is in that final state.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from flux.errors import from_code_name
from flux.v1 import control_pb2

Request = control_pb2.RunAndWaitStreamRequest
Answer = control_pb2.RunAndWaitStreamResponse
# A run's call that ended without a word about it (``format`` with the server's address).
ENDED = "the Flux server at {} ended the run without an answer"
# A run's receipt did not come in time (as a call's DEADLINE_EXCEEDED, flux/client/requests.py).
LATE = "the Flux server at {} did not answer in time"
# What the reader hands a run: an answer, or the call's end (its error, or None: ended cleanly).
Handed = Answer | grpc.RpcError | None
# How long a run's receipt waits for its final state (RunAndWaitStreamRequest.receipt_after_ms).
# Runs one after another on the peers workload end in about 2 ms: their receipts are not sent.
# Never longer than the run's timeout, so a run that times out has its execution id by then.
RECEIPT_AFTER_MS = 5
# Put on an asyncio run's queue by its timer: the wait ran out.
_EXPIRED = object()


class TimedOut(Exception):
    """The wait ran out before the run's final state; ``execution_id`` is None where it ran out
    before the receipt too (the server did not answer in time)."""

    def __init__(self, execution_id: str | None):
        super().__init__(execution_id)
        self.execution_id = execution_id


def _request(run_id: int, run: control_pb2.RunWorkflowRequest, timeout: float | None) -> Request:
    after = RECEIPT_AFTER_MS if timeout is None else max(0, min(RECEIPT_AFTER_MS, int(timeout * 1000)))
    return Request(run_id=run_id, run=run, receipt_after_ms=after)


class _Deadlines:
    """When a run with a timeout stops waiting: for its receipt, the longer of the wait's timeout
    and the client's call timeout (as a ``RunAndWait`` call's own deadline); for its final state,
    the wait's timeout after the run began. No timeout: never."""

    def __init__(self, now: float, timeout: float | None, receipt_timeout: float | None):
        self.receipt = None if timeout is None else now + max(timeout, receipt_timeout or 0.0)
        self.final = None if timeout is None else now + timeout

    def of(self, run: _Run) -> float | None:
        return self.receipt if run.receipt is None else self.final


class _Call:
    """One open ``RunAndWaitStream`` call and the runs waiting on it."""

    def __init__(self, open_call: Callable[[Iterator[Request]], Iterator[Answer]]):
        self._requests: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self._waiting: dict[int, queue.SimpleQueue[Handed]] = {}
        self._lock = threading.Lock()
        self.ended = False
        self._call = open_call(iter(self._requests.get, None))
        threading.Thread(target=self._read, name="flux-runs", daemon=True).start()

    def send(self, request: Request) -> queue.SimpleQueue[Handed] | None:
        """Queue the run; its answers arrive on the queue returned (None: the call has ended)."""
        answers: queue.SimpleQueue[Handed] = queue.SimpleQueue()
        with self._lock:
            if self.ended:
                return None
            self._waiting[request.run_id] = answers
        self._requests.put(request)
        return answers

    def forget(self, run_id: int) -> None:
        """No longer wait for the run: an answer for it that comes later is dropped."""
        with self._lock:
            self._waiting.pop(run_id, None)

    def close(self) -> None:
        """Stop writing: the server ends the call once every run on it is answered."""
        self._requests.put(None)

    def _read(self) -> None:
        error: grpc.RpcError | None = None
        try:
            for answer in self._call:
                last = answer.WhichOneof("answer") != "accepted"
                with self._lock:
                    answers = (self._waiting.pop if last else self._waiting.get)(answer.run_id, None)
                if answers is not None:  # else not a run of ours: nobody to hand it to
                    answers.put(answer)
        except grpc.RpcError as exc:  # also the channel closed under it: CANCELLED
            error = exc
        finally:
            with self._lock:
                self.ended = True
                waiting, self._waiting = list(self._waiting.values()), {}
            for answers in waiting:
                answers.put(error)
            self.close()  # ends the request iterator's thread, should the server have ended first


class CallEnded(Exception):
    """The call ended before the run's receipt: ``error`` says why (None: the server ended it)."""

    def __init__(self, error: grpc.RpcError | None):
        super().__init__(error)
        self.error = error


class _Run:
    """What one run has been answered so far."""

    MORE = object()

    def __init__(self) -> None:
        self.receipt: control_pb2.Execution | None = None

    def take(self, handed: Handed) -> object:
        """The final state when ``handed`` is the run's last answer, ``MORE`` while more is to come,
        and None where the call ended after the receipt (the caller follows it with ``wait``).
        A refusal raises its domain error; a call that ended before the receipt, ``CallEnded``."""
        if not isinstance(handed, Answer):  # the call ended
            if self.receipt is None:
                raise CallEnded(handed)
            return None
        kind = handed.WhichOneof("answer")
        if kind == "accepted":
            self.receipt = handed.accepted
            return self.MORE
        if kind == "finished":
            if self.receipt is None:  # it ended before its receipt was due (receipt_after_ms)
                self.receipt = handed.finished
            return handed.finished
        raise from_code_name(handed.refused.code, handed.refused.message)


class RunStream:
    """The blocking client's runs on its ``RunAndWaitStream`` call, opened when first needed."""

    def __init__(self, open_call: Callable[[Iterator[Request]], Iterator[Answer]]):
        self._open_call = open_call
        self._lock = threading.Lock()
        self._call: _Call | None = None
        self._ids = itertools.count(1)

    def run(
        self,
        request: control_pb2.RunWorkflowRequest,
        timeout: float | None = None,
        receipt_timeout: float | None = None,
    ) -> tuple[str, control_pb2.Execution | None]:
        """The execution's id and its final state (None: the call ended after the receipt).
        A refusal raises its domain error; a call that ended before the receipt, ``CallEnded``;
        a wait that ran out (``_Deadlines``), ``TimedOut``."""
        deadlines = _Deadlines(time.monotonic(), timeout, receipt_timeout)
        answers = None
        while answers is None:  # at most twice: a call found ended is replaced
            with self._lock:
                if self._call is None or self._call.ended:
                    self._call = _Call(self._open_call)
                call, run_id = self._call, next(self._ids)
            answers = call.send(_request(run_id, request, timeout))
        run = _Run()
        outcome: object = _Run.MORE
        while outcome is _Run.MORE:
            deadline = deadlines.of(run)
            try:
                handed = answers.get(
                    timeout=None if deadline is None else max(0.0, deadline - time.monotonic())
                )
            except queue.Empty:
                call.forget(run_id)
                raise TimedOut(None if run.receipt is None else run.receipt.execution_id) from None
            outcome = run.take(handed)
        assert run.receipt is not None
        return run.receipt.execution_id, outcome  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            if self._call is not None:
                self._call.close()


class AsyncRunStream:
    """The same for ``flux.aio``: the call read by a task, its writes one at a time (grpc.aio)."""

    def __init__(self, open_call: Callable[[], grpc.aio.StreamStreamCall]):
        self._open_call = open_call
        self._call: grpc.aio.StreamStreamCall | None = None
        self._reader: asyncio.Task[None] | None = None
        self._writing = asyncio.Lock()
        self._started: grpc.aio.StreamStreamCall | None = None  # the call a write went through
        self._waiting: dict[int, asyncio.Queue[Handed]] = {}
        self._ids = itertools.count(1)

    async def run(
        self,
        request: control_pb2.RunWorkflowRequest,
        timeout: float | None = None,
        receipt_timeout: float | None = None,
    ) -> tuple[str, control_pb2.Execution | None]:
        """As ``RunStream.run``. Cancelled, the run is only no longer waited for."""
        loop = asyncio.get_running_loop()
        deadlines = _Deadlines(loop.time(), timeout, receipt_timeout)
        if self._call is None or self._reader is None or self._reader.done():
            self._call = call = self._open_call()
            self._reader = asyncio.create_task(self._read(call, self._waiting))
        call, reader, waiting, run_id = self._call, self._reader, self._waiting, next(self._ids)
        answers: asyncio.Queue[Handed | object] = asyncio.Queue()
        waiting[run_id] = answers
        expiry: asyncio.TimerHandle | None = None
        try:
            async with self._writing:
                write = asyncio.ensure_future(call.write(_request(run_id, request, timeout)))
                if call is not self._started:
                    # Raced against the reader: grpc.aio's first write waits for the call to start,
                    # forever where the call ends first; the reader then tells us why.
                    await asyncio.wait({write, reader}, return_when=asyncio.FIRST_COMPLETED)
                    if not write.done():
                        write.cancel()
                try:
                    # Shielded: a caller cancelled mid-write must not cancel the write, which in
                    # grpc.aio cancels the whole call, and with it every other run waiting on it.
                    await asyncio.shield(write)
                    self._started = call
                except grpc.RpcError as exc:
                    raise CallEnded(exc) from None
                except asyncio.InvalidStateError:
                    pass  # the call ended as we wrote: the reader hands us why
                except asyncio.CancelledError:
                    if not reader.done():
                        raise  # we were cancelled, not the write by the call's end
            run = _Run()
            outcome: object = _Run.MORE
            while outcome is _Run.MORE:
                deadline = deadlines.of(run)
                if deadline is not None and expiry is None:
                    # The receipt's deadline, then (a new timer) the final state's.
                    expiry = loop.call_at(deadline, answers.put_nowait, _EXPIRED)
                handed = await answers.get()
                if handed is _EXPIRED:
                    raise TimedOut(None if run.receipt is None else run.receipt.execution_id)
                outcome = run.take(handed)  # type: ignore[arg-type]
                if run.receipt is not None and expiry is not None and deadlines.of(run) != deadline:
                    expiry.cancel()
                    expiry = None
        finally:
            if expiry is not None:
                expiry.cancel()
            waiting.pop(run_id, None)  # a late answer finds nobody: dropped
        assert run.receipt is not None
        return run.receipt.execution_id, outcome  # type: ignore[return-value]

    async def _read(self, call: grpc.aio.StreamStreamCall, waiting: dict[int, asyncio.Queue[Handed]]) -> None:
        error: grpc.RpcError | None = None
        try:
            async for answer in call:
                answers = waiting.get(answer.run_id)
                if answers is not None:
                    answers.put_nowait(answer)
        except grpc.RpcError as exc:
            error = exc
        finally:
            self._waiting = {}  # the next run opens a new call, with a table of its own
            for answers in waiting.values():
                answers.put_nowait(error)

    async def close(self) -> None:
        if self._call is not None and self._reader is not None and not self._reader.done():
            self._call.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
