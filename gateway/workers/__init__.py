"""What workers call: the ``WorkerService`` over HTTP, dispatch pushed as Server-Sent Events.

``routes`` holds the routes; the SSE relay they use is ``gateway.wire.stream``.
"""

from gateway.workers.routes import router

__all__ = ["router"]
