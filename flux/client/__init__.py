"""The Python clients of the control plane: what scripts, the CLI and tests call.

- ``sync``: :class:`FluxClient`, blocking, one gRPC channel (the CLI's client).
- ``aio``: the same surface on ``asyncio`` (public as ``flux.aio``).
- ``requests``: requests built from Python values, inputs in per-call chunks, the one
  place a ``grpc.RpcError`` becomes a :class:`~flux.errors.FluxError`.
- ``runs`` and ``streams``: ``RunMany`` answers as they arrive, several streams read as one.
- ``batches``: what ``map`` returns (``Executions``, with its batch) and ``client.batches``.
- ``tenant_admin``: ``client.tenants``, tenants and their tokens (admin tokens only).

Import from here (or ``flux.aio``); the modules are this package's own.
"""

from flux.client.batches import BatchCalls, BatchHandle, BatchWaitTimedOut, Executions
from flux.client.requests import WaitTimedOut, chunked, rpc_error
from flux.client.runs import CallEnded, RunStream
from flux.client.sync import FluxClient
from flux.client.tenant_admin import NewToken, TenantAdmin

__all__ = [
    "BatchCalls",
    "BatchHandle",
    "BatchWaitTimedOut",
    "CallEnded",
    "Executions",
    "FluxClient",
    "NewToken",
    "RunStream",
    "TenantAdmin",
    "WaitTimedOut",
    "chunked",
    "rpc_error",
]
