"""Replicas sharing PostgreSQL: ``replica.shared(store)`` builds the three strategies
(``binder``, ``feed``, ``fleet``); ``worker_documents`` is what each publishes of its workers,
``background`` its fire-and-forget database calls."""

__all__ = ["background", "binder", "feed", "fleet", "replica", "worker_documents"]
