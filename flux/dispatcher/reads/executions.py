"""Listings read from the store, executions matched on the live state the dispatcher holds."""

from __future__ import annotations

from collections.abc import Callable

from flux.dispatcher.reads.listing import needs_live_state
from flux.domain.execution import Execution
from flux.domain.tenant import DEFAULT_TENANT
from flux.domain.workflow import WorkflowRecord
from flux.errors import InvalidArgument, NotFound
from flux.store import ExecutionQuery, Store

# Rows a listing reads from the store per round while it filters them against live state.
LISTING_BATCH = 500


async def list_executions(
    store: Store, current: Callable[[str], Execution | None], query: ExecutionQuery
) -> tuple[list[Execution], ExecutionQuery | None]:
    """A page of executions from the store, each as ``current`` knows it now, and the next page's query.

    The store holds every execution (with replicas, those of every replica); the
    dispatcher may know an unfinished one's state and worker a moment before the
    store does, so such rows are read too and matched on their live state.
    """
    live = needs_live_state(query)
    batch = max(query.limit + 1, LISTING_BATCH) if live else query.limit + 1
    found: list[Execution] = []
    after = query.after
    while True:
        rows = await store.list_executions(
            ExecutionQuery(
                batch, query.states, query.workflow, query.worker, query.created_after, after, live
            )
        )
        for row in rows:
            now = current(row.execution_id) or row
            if query.matches(now):
                if len(found) == query.limit:  # one more exists: there is a next page
                    last = found[-1]
                    return found, ExecutionQuery(
                        query.limit, query.states, query.workflow, query.worker, query.created_after,
                        (last.seq, last.execution_id),
                    )  # fmt: skip
                found.append(now)
        if len(rows) < batch:
            return found, None
        after = (rows[-1].seq, rows[-1].execution_id)


async def list_workflows(
    store: Store, name: str = "", version: int = 0, tenant: str | None = None
) -> list[tuple[WorkflowRecord, int]]:
    """(version, versions of its name): the latest of every name, or every version of ``name``.

    ``tenant``: only its own workflows and ``default``'s (None: every tenant's, for an admin).
    """
    if version and not name:
        raise InvalidArgument("version needs name: the workflow whose version to show")
    if version < 0:
        raise InvalidArgument(f"version must be >= 0 (0 means every version); got {version}")
    records = await store.list_workflows(name)
    if tenant is not None:
        records = [r for r in records if r.tenant in (DEFAULT_TENANT, tenant)]
    if name:
        if not records:
            raise NotFound(
                f"workflow {name!r} is not registered; 'flux workflow list' shows the registered ones"
            )
        count = len(records)
        if version:
            records = [r for r in records if r.version == version]
            if not records:
                raise NotFound(f"workflow {name!r} has no version {version}; it has versions 1 to {count}")
        return [(r, count) for r in records]
    counts: dict[str, int] = {}
    latest: dict[str, WorkflowRecord] = {}
    for record in records:  # by name, then version: the last of a name is its latest
        counts[record.name] = counts.get(record.name, 0) + 1
        latest[record.name] = record
    return [(record, counts[record.name]) for record in latest.values()]
