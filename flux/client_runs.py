"""``FluxClient.run(wait=True)`` as messages on one ``RunAndWaitStream`` call the client keeps
open, instead of a ``RunAndWait`` call per run: starting a call costs the client and the server
several times what a message does (on the peers workload, about 1 ms of a 3 ms run).

The call is opened by the first run and kept; a daemon thread reads it and hands each answer to
the run it names, so any number of threads may run at once. When the call fails (the server
restarted, the channel closed), every run waiting on it is told, and the next run opens a new
one. A run that had its receipt when that happened is followed by ``wait``, as a broken
``RunAndWait`` is: accepted work is never submitted twice.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator

import grpc

from flux.errors import FluxError, Unavailable, from_code_name
from flux.v1 import control_pb2

Request = control_pb2.RunAndWaitStreamRequest
Answer = control_pb2.RunAndWaitStreamResponse
# What the reader hands a run: an answer, or the call's end (its error, or None: ended cleanly).
Handed = Answer | grpc.RpcError | None


class _Call:
    """One open ``RunAndWaitStream`` call and the runs waiting on it."""

    def __init__(self, open_call: Callable[[Iterator[Request]], Iterator[Answer]]):
        self._requests: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self._waiting: dict[int, queue.SimpleQueue[Handed]] = {}
        self._lock = threading.Lock()
        self.ended = False
        self._call = open_call(iter(self._requests.get, None))
        threading.Thread(target=self._read, name="flux-runs", daemon=True).start()

    def send(self, run_id: int, request: control_pb2.RunWorkflowRequest) -> queue.SimpleQueue[Handed] | None:
        """Queue the run; its answers arrive on the queue returned (None: the call has ended)."""
        answers: queue.SimpleQueue[Handed] = queue.SimpleQueue()
        with self._lock:
            if self.ended:
                return None
            self._waiting[run_id] = answers
        self._requests.put(Request(run_id=run_id, run=request))
        return answers

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


class RunStream:
    """The client's runs on its ``RunAndWaitStream`` call, opened when first needed."""

    def __init__(self, open_call: Callable[[Iterator[Request]], Iterator[Answer]]):
        self._open_call = open_call
        self._lock = threading.Lock()
        self._call: _Call | None = None
        self._ids = itertools.count(1)

    def run(
        self, request: control_pb2.RunWorkflowRequest, error: Callable[[grpc.RpcError], FluxError]
    ) -> tuple[control_pb2.Execution, control_pb2.Execution | None]:
        """The run's receipt and final state; the final state is None where the call ended after
        the receipt. A refusal raises its domain error, a call that ended first ``error(its error)``."""
        answers = None
        while answers is None:  # at most twice: a call found ended is replaced
            with self._lock:
                if self._call is None or self._call.ended:
                    self._call = _Call(self._open_call)
                call, run_id = self._call, next(self._ids)
            answers = call.send(run_id, request)
        receipt = None
        while True:
            handed = answers.get()
            if not isinstance(handed, Answer):  # the call ended
                if receipt is not None:
                    return receipt, None
                if handed is None:
                    raise Unavailable("the Flux server ended the call without answering the run")
                raise error(handed)
            kind = handed.WhichOneof("answer")
            if kind == "accepted":
                receipt = handed.accepted
            elif kind == "finished":
                return receipt or handed.finished, handed.finished
            else:
                raise from_code_name(handed.refused.code, handed.refused.message)

    def close(self) -> None:
        with self._lock:
            if self._call is not None:
                self._call.close()
