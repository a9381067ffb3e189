"""One ended attempt of an execution, as stored with it and listed by ``execution show``, explain
and the dashboard; its own module so the policy (flux.domain.policy, which re-exports these) stays
about what should happen, this about what did."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Attempt:
    """One ended attempt of an execution, as ``execution show`` and explain list them."""

    attempt: int
    worker: str
    started_at: float
    ended_at: float
    reason: str  # COMPLETED, ERROR, TIMEOUT, HEARTBEAT_TIMEOUT, WORKER_LOST or PREEMPTED
    error_type: str = ""
    error_message: str = ""

    def to_list(self) -> list[object]:
        return [
            self.attempt, self.worker, self.started_at, self.ended_at, self.reason,
            self.error_type, self.error_message,
        ]  # fmt: skip

    @classmethod
    def from_list(cls, item: list[object]) -> Attempt:
        return cls(*item)  # type: ignore[arg-type]


# An error message kept in an attempt record: enough to read, never a whole traceback per try.
ATTEMPT_MESSAGE_BYTES = 1024


def attempts_json(attempts: tuple[Attempt, ...]) -> str:
    return json.dumps([a.to_list() for a in attempts], separators=(",", ":")) if attempts else "[]"


def attempts_from_json(text: str) -> tuple[Attempt, ...]:
    return tuple(Attempt.from_list(item) for item in json.loads(text or "[]"))


def attempt_to_proto(attempt: Attempt) -> Any:
    from flux.v1 import control_pb2

    return control_pb2.Attempt(
        attempt=attempt.attempt,
        worker=attempt.worker,
        started_at_ms=int(attempt.started_at * 1000),
        ended_at_ms=int(attempt.ended_at * 1000),
        reason=attempt.reason,
        error_type=attempt.error_type,
        error_message=attempt.error_message,
    )


def attempt_from_proto(message: Any) -> Attempt:
    return Attempt(
        message.attempt,
        message.worker,
        message.started_at_ms / 1000,
        message.ended_at_ms / 1000,
        message.reason,
        message.error_type,
        message.error_message,
    )
