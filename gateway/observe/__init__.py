"""Watching the gateway: ``/healthz``, ``/metrics`` in the Prometheus format, and its part of a trace.

- ``health``: ``GET /healthz``, open to anyone (load balancers probe it).
- ``metrics``: ``GET /metrics``, the core's numbers as Prometheus text.
- ``tracing``: a submission's W3C context passed on to the core.
"""

import gateway.observe.health as health
import gateway.observe.metrics as metrics
import gateway.observe.tracing as tracing

__all__ = ["health", "metrics", "tracing"]
