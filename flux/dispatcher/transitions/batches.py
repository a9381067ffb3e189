"""Batches: made or joined by a bulk submission, and cancelled as one (flux/domain/batch.py).

A RunWorkflows call asks for a batch (``BatchAsk``): a new one (``batch``, or ``max_concurrent``),
or an existing one to add to (``batch_id``, for a batch larger than one call's cap: ``client.map``
sends 100,000 inputs as ten calls, the first making the batch, the others joining it). The batch
row is stored before its first members, in its own commit; members are saved as executions
naming it, and a throttled batch's members carry its budget in their flow keys (state/flow.py's
``batch_gates``), which is all ``max_concurrent`` needs: the matcher admits them through the same
budgets as a concurrency key, on one server and across replicas.

Cancelling a batch marks it cancelled (later calls may not join it), then cancels its unfinished
members newest first: those still waiting on the batch's budget go before the running ones, so a
running member's freed slot admits nobody who would only be cancelled next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from flux.domain.batch import Batch, check_batch_id, check_max_concurrent, new_batch_id
from flux.errors import FailedPrecondition, InvalidArgument, NotFound

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle

# Members cancelled in one step (one server: one commit, Binder.cancel_many).
CANCEL_CHUNK = 2_000


class BatchAsk(NamedTuple):
    """What a bulk submission asks of batches: a new one (``new``, perhaps ``max_concurrent``), or
    to join ``batch_id``."""

    new: bool = False
    max_concurrent: int | None = None
    batch_id: str = ""

    @property
    def wanted(self) -> bool:
        return self.new or self.max_concurrent is not None or bool(self.batch_id)


NO_BATCH = BatchAsk()


def checked_ask(new: bool, max_concurrent: object, batch_id: str) -> BatchAsk:
    """A request's batch fields, checked, each refusal naming its field."""
    try:
        if max_concurrent is not None:
            check_max_concurrent(max_concurrent, "max_concurrent")
        if batch_id:
            check_batch_id(batch_id, "batch_id")
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None
    if batch_id and (new or max_concurrent is not None):
        raise InvalidArgument(
            "batch_id adds runs to an existing batch, whose terms are its own: leave batch and "
            "max_concurrent unset with it"
        )
    return BatchAsk(new, max_concurrent, batch_id)  # type: ignore[arg-type]


async def resolve(d: Handle, ask: BatchAsk, workflow_name: str, tenant: str) -> tuple[Batch | None, bool]:
    """The batch a submission's executions join, and whether it is new (the caller stores it)."""
    if not ask.wanted:
        return None, False
    if not ask.batch_id:
        return Batch(new_batch_id(), tenant, workflow_name, ask.max_concurrent or 0, d.clock()), True
    batch = await visible(d, ask.batch_id, tenant)
    if batch.workflow_name != workflow_name:
        raise InvalidArgument(
            f"batch_id {batch.batch_id} runs workflow {batch.workflow_name!r}; every member runs it, "
            f"not {workflow_name!r}"
        )
    if batch.cancelled_at:
        raise FailedPrecondition(f"batch {batch.batch_id} is cancelled: it takes no new runs")
    return batch, False


async def visible(d: Handle, batch_id: str, tenant: str | None) -> Batch:
    """The batch, when ``tenant`` may see it (None: every tenant's); NotFound otherwise."""
    try:
        check_batch_id(batch_id)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    batch = await d.store.get_batch(batch_id)
    if batch is None or (tenant is not None and batch.tenant != tenant):
        raise NotFound(f"batch {batch_id!r} does not exist")
    return batch


async def cancel(d: Handle, batch: Batch) -> None:
    """Mark ``batch`` cancelled and cancel every unfinished member (those finished meanwhile stay)."""
    await d.store.cancel_batch(batch.batch_id, d.clock())
    members = await d.store.batch_unfinished(batch.batch_id)
    for start in range(0, len(members), CANCEL_CHUNK):
        # In list order, newest member first (see the module's docstring).
        await d.binder.cancel_many(members[start : start + CANCEL_CHUNK])
