"""Watching the control plane: lifecycle events, structured logs and the status snapshot.

- ``Lifecycle`` (defined in ``flux.dispatcher.lifecycle``, which the dispatcher
  owns; re-exported here): what the dispatcher calls at each lifecycle event;
  it counts, times and writes one ``flux.lifecycle`` log line per event.
- ``logs``: the ``--log-format text|json`` formatters.
- ``status``: one snapshot of the fleet and the queue, for ``GetStatus`` and
  ``GetMetrics``.

Nothing here imports grpc or protobuf: the server converts at its edge.
"""

from flux.dispatcher.lifecycle import (
    LATENCY_BOUNDS,
    REQUEUE_REASONS,
    STAGES,
    Histogram,
    Lifecycle,
    Requeue,
)

__all__ = ["LATENCY_BOUNDS", "REQUEUE_REASONS", "STAGES", "Histogram", "Lifecycle", "Requeue"]
