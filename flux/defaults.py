"""Every default a process starts with, defined once.

The process configs (``ServerConfig``, ``Settings``, ``GatewaySettings``,
``HttpLimits``, ``WorkerConfig``) take their field defaults from here, and the
CLI shows the same values in ``--help`` and uses them when a flag is left out,
so a default changes in one place. Plain constants: importing this loads
nothing else, so building the CLI's parser stays cheap.
"""

from __future__ import annotations

import os

KiB, MiB, GiB = 1024, 1024**2, 1024**3

# Where things listen.
HOST = "127.0.0.1"
GRPC_PORT = 50051
HTTP_PORT = 8080
SERVER = f"{HOST}:{GRPC_PORT}"


def default_server() -> str:
    """Where clients and workers find the server: ``$FLUX_SERVER``, else ``SERVER``."""
    return os.environ.get("FLUX_SERVER", SERVER)


# The dispatcher's timing.
ACK_DEADLINE = 10.0  # seconds a dispatch may wait for its claim before it is requeued
GRACE_PERIOD = 30.0  # seconds a disconnected worker keeps its executions (and its name)
SAFETY_TICK = 5.0  # seconds between full placement passes, besides the event-driven ones
PING_INTERVAL = 15.0  # seconds an idle worker stream waits before a ping
# Seconds the oldest execution of a shape waits before it gets a nominated worker (0: never).
STARVATION_AFTER = 30.0
# Seconds a preempted execution's worker has to stop it and hand it back before its room is
# freed anyway (--preemption-grace).
PREEMPTION_GRACE = 30.0
# Victims each tenant's preemptions may stop in a minute (--preemption-budget; 0: no limit): enough
# to reclaim a quota of many small executions at once, while a tenant that submits and cancels in
# a loop stops at most this many of others' executions a minute.
PREEMPTION_BUDGET = 60
# Seconds the PostgreSQL ``dispatches`` log keeps the rows of a finished execution (0: forever).
DISPATCH_RETENTION = 7 * 86400.0

# Admission and caps (issue: nobody without a token can exhaust the core).
MAX_PENDING = 500_000
MAX_PENDING_BYTES = 2 * GiB
MAX_WORKERS = 10_000
MAX_WORKER_METADATA = 256 * KiB
# Bulk submission (RunWorkflows): inputs per call; clients send more in several calls, each
# also within RUN_MANY_CHUNK_BYTES of inputs (under the 16 MiB message cap with room to spare).
MAX_BATCH_INPUTS = 10_000
# Items in one ClaimBatch or CompleteBatch: a worker never holds more dispatches than its
# capacity, whose ceiling this is.
MAX_BATCH_ITEMS = 4096
RUN_MANY_CHUNK_BYTES = 8 * MiB

# The HTTP front.
HTTP_HEAD_TIMEOUT = 10.0  # seconds a request head may take to arrive in full
HTTP_MAX_HEAD_BYTES = 32 * KiB
HTTP_MAX_CONNECTIONS = 1000
HTTP_KEEP_ALIVE = 5.0

# A worker.
CAPACITY = 16  # concurrent executions
# Executions the server may queue at a worker beyond its room (--prefetch): chosen by measurement,
# docs/benchmarks.md ("Worker prefetch").
PREFETCH = 16
MAX_PREFETCH = 64
# On SIGTERM: seconds to finish running work before handing the rest back (under the pod grace period).
DRAIN_TIMEOUT = 60.0
WORK_DIR = ".flux/worker"
DISK_PATH = "/"

# KEDA's StreamIsActive streams (--keda-max-streams, --keda-max-streams-per-peer): KEDA opens one
# per ScaledObject, from its operator's pod; each open stream is held memory on the server.
KEDA_MAX_STREAMS = 256
KEDA_MAX_STREAMS_PER_PEER = 16
