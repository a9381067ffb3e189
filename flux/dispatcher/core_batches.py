"""The Dispatcher's batch methods (BatchService, the gateway's batch routes): read, follow and
cancel a batch (flux/domain/batch.py). A mixin of ``Dispatcher`` (core.py), as core_workers.py is;
each method hands its work to ``transitions/batches.py`` or ``reads/batches.py``.

``tenant``: the caller's tenant, whose batches alone it sees; None for a cluster admin (every
tenant's). Another tenant's batch is answered as one that does not exist.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, cast

from flux.dispatcher.reads import batches as batch_reads
from flux.dispatcher.transitions import batches
from flux.domain.batch import BatchProgress

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle


class BatchMethods:
    async def get_batch(self, batch_id: str, tenant: str | None = None) -> BatchProgress:
        d = cast("Handle", self)
        return await batch_reads.progress(d, await batches.visible(d, batch_id, tenant))

    async def watch_batch(self, batch_id: str, tenant: str | None = None) -> AsyncIterator[BatchProgress]:
        """Its progress now, then each change, ending once every member is finished."""
        d = cast("Handle", self)
        async for step in batch_reads.watch(d, await batches.visible(d, batch_id, tenant)):
            yield step

    async def cancel_batch(self, batch_id: str, tenant: str | None = None) -> BatchProgress:
        """Cancel every unfinished member (the final states committed before this returns)."""
        d = cast("Handle", self)
        batch = await batches.visible(d, batch_id, tenant)
        await batches.cancel(d, batch)
        return await batch_reads.progress(d, (await batches.visible(d, batch_id, tenant)))
