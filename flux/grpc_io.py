"""gRPC's socket I/O for the server and worker processes, chosen as grpc is first imported.

grpcio 1.85 reads and writes its sockets on EventEngine threads and hands each event to the
completion-queue thread that ``grpc.aio`` waits on: a thread hop for every message. With the
EventEngine turned off for client channels and for the server's listener
(``GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener``), the thread waiting on the
completion queue polls the sockets itself, as gRPC did before EventEngine. On the project's
2-core box, alternated with the default:
- a bare ``grpc.aio`` stream round trip: p50 283-297 us with the default, 160-181 us without;
- a sequential Flux run (client, server, 4 workers): p50 1.52-1.55 ms and 632-645 runs/s with
  the default, 1.29-1.34 ms and 715-752 runs/s with the server and the workers polling this way,
  and less CPU in each (server 0.93-0.98 ms a run against 1.06-1.08 ms, workers 0.36-0.40 against
  0.46-0.50 ms).

Only the server and the workers (``flux start server``, ``flux start worker``): their streams are
always open, so a connection that breaks is seen at once. A client's channel may sit idle between
calls, and without the EventEngine an idle connection is polled only every 5 s: after a server
restart the client's next call failed on the dead connection ("Stream removed") instead of
reconnecting. Clients (the CLI, the Python clients, the gateway) keep grpc's defaults; polling
this way would take another 1-3 % off a sequential run.

grpc reads ``GRPC_EXPERIMENTS`` once, when it is imported; ``choose`` sets it for that import only,
so the processes a worker starts (a sync body's) see the environment as it was. A
``GRPC_EXPERIMENTS`` already in the environment, even empty, is left as it is: set it empty to
keep grpc's defaults.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "GRPC_EXPERIMENTS"
POLLED_BY_COMPLETION_QUEUE = "-event_engine_client,-event_engine_listener"


def choose() -> bool:
    """Import grpc polling its sockets on the completion queue's thread; whether it does.

    False when grpc was imported already (it has read its settings) or the environment names its
    own ``GRPC_EXPERIMENTS``.
    """
    if "grpc" in sys.modules or VARIABLE in os.environ:
        return False
    os.environ[VARIABLE] = POLLED_BY_COMPLETION_QUEUE
    try:
        import grpc  # noqa: F401  it reads the variable now, once
    finally:
        del os.environ[VARIABLE]
    return True
