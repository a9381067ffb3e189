"""``make chaos``: a bounded, seeded fault run against real Flux processes (see bench/chaos/run.py)."""

from bench.chaos.run import run

__all__ = ["run"]
