"""gRPC's socket I/O for every Flux process, chosen before grpc is first imported.

grpcio 1.85 reads and writes its sockets on EventEngine threads and hands each event to the
completion-queue thread that ``grpc.aio`` and the sync stubs wait on: two thread hops for every
message, on both sides of a connection. With the EventEngine turned off for client channels and
for the server's listener (``GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener``), the
thread waiting on the completion queue polls the sockets itself, as gRPC did before EventEngine.
On the project's 2-core box, alternated with the default:
- a bare ``grpc.aio`` stream round trip: p50 283-297 us with the default, 160-181 us without;
- a sequential Flux run (client, server, a worker): p50 1.77-1.89 ms and 502-548 runs/s with
  the default, 1.50-1.66 ms and 567-642 runs/s without, and less CPU in every process (server
  1.10-1.24 ms a run against 1.20-1.34 ms).

grpc reads ``GRPC_EXPERIMENTS`` once, when it is imported, so ``flux/__init__`` imports this
module first; a process that imported grpc before Flux keeps grpc's defaults. A
``GRPC_EXPERIMENTS`` already in the environment, even empty, is left as it is: set it empty to keep
grpc's defaults. The variable stays in the environment, so the processes a Flux process starts
(a worker's sync bodies run in a child among them) inherit it, and their grpc, if they use one,
polls the same way.
"""

from __future__ import annotations

import os

VARIABLE = "GRPC_EXPERIMENTS"
POLLED_BY_COMPLETION_QUEUE = "-event_engine_client,-event_engine_listener"

if VARIABLE not in os.environ:
    os.environ[VARIABLE] = POLLED_BY_COMPLETION_QUEUE
