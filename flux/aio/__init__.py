"""The asyncio client, under its documented name: ``from flux.aio import FluxClient``.

The code is ``flux/client/aio.py``, beside the blocking client it mirrors; this name stays
because README and the guides use it (``flux.aio.FluxClient``).
"""

from flux.client.aio import FluxClient, WaitTimedOut

__all__ = ["FluxClient", "WaitTimedOut"]
