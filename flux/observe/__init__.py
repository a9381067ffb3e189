"""Watching the control plane: the fleet feed, structured logs and the status snapshot.

The lifecycle events themselves are the dispatcher's (``flux.dispatcher.state.lifecycle``); nothing
here imports the dispatcher, so the gateway can use these without loading it.

- ``fleet``: the fan-out of fleet changes to ``WatchFleet`` and ``GET /events``.
- ``logs``: the ``--log-format text|json`` formatters.
- ``status``: one snapshot of the fleet and the queue, for ``GetStatus`` and
  ``GetMetrics``.

Nothing here imports grpc or protobuf: the server converts at its edge.
"""
