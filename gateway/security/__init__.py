"""Who may reach a route, and what a request or a connection may cost, before any route runs.

- ``auth``: tokens checked from the request head (``HeaderAuth``, one ``Guard`` per route).
- ``tickets``: short-lived stream tickets for code that cannot set headers (EventSource).
- ``limits``: the request body limit; ``connections``: the bounds on a connection itself
  (head timeout and size, connection caps), wrapped around uvicorn's protocol.
"""

import gateway.security.connections as connections
import gateway.security.tickets as tickets
from gateway.security.auth import API_BEARER, SESSION_HEADER, WORKER_BEARER, Guard, HeaderAuth
from gateway.security.connections import (
    BACKLOG,
    HttpLimits,
    bind,
    fit_to_open_files,
    guarded_protocol,
    quiet_accept_failures,
    raise_open_files_limit,
)
from gateway.security.limits import BodyLimit
from gateway.security.tickets import FLEET_SCOPE, access_for, execution_scope, worker_scope

__all__ = [
    "API_BEARER", "BACKLOG", "FLEET_SCOPE", "SESSION_HEADER", "WORKER_BEARER", "BodyLimit", "Guard", "HeaderAuth",
    "HttpLimits", "access_for", "bind", "connections", "execution_scope", "fit_to_open_files", "guarded_protocol",
    "quiet_accept_failures", "raise_open_files_limit", "tickets", "worker_scope",
]  # fmt: skip
