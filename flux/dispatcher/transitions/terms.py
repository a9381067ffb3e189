"""Tenants' terms applied: quotas and fair share count what every worker holds, from the next pass."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flux.dispatcher.cycle.placing import fleet_capacity

if TYPE_CHECKING:
    from flux.dispatcher.handle import Handle
    from flux.domain.tenant import Tenant


def apply(d: Handle, tenants: list[Tenant]) -> None:
    """Tenants' terms changed (or were loaded): quotas and fair share apply from the next pass.

    On replicas each claim then checks quotas against the whole cluster's usage too.
    """
    holding = []
    for entry in d.registry.values():
        for execution_id in entry.holdings:
            execution = d.table.get(execution_id)
            if execution is not None:
                holding.append((execution_id, execution.tenant, d.catalogue.shape_of(execution).demand))
    d.usage.configure(tenants, fleet_capacity(d), holding)
    d.binder.quotas(d.usage.accounts is not None)
    if d.usage.accounts is not None:
        d.passes.everything()
