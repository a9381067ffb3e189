"""Answers that change nothing: listings of executions (``executions``, ``listing``) and workers
(``worker_pages``), and waiting for final states (``waiting``)."""

__all__ = ["executions", "listing", "waiting", "worker_pages"]
