"""The delay between tries of a worker's calls (reconnects, claims, results) while the server is unreachable."""

from __future__ import annotations

import random


class Backoff:
    """Exponential backoff with full jitter, so a fleet does not reconnect in lockstep."""

    def __init__(self, initial: float, maximum: float):
        self.initial, self.maximum, self.attempt = initial, maximum, 0

    def next(self) -> float:
        delay = min(self.maximum, self.initial * 2**self.attempt)
        self.attempt += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0
