"""The dispatcher's unfinished executions, and how many input bytes they stand for.

A pending input larger than the inline threshold lives only in the store: the
record here keeps ``input_json=""`` (never a valid input, which is at least
``null``) and the dispatch loads it on its way out. So 10,000 pending 64 KiB
inputs cost the records, not 640 MiB of RAM. The byte total counts every input,
kept here or not, because admission limits what the store is asked to hold.

Sizes follow the id, not the record: every way an execution leaves (finished,
cancelled, claimed by another replica, forgotten) goes through ``pop`` or
``del``, so the total cannot drift whichever path removed it.

The same totals are kept per tenant (``count_of``, ``bytes_of``, ``tenants``)
for per-tenant admission (``ExecutionTable.admit``): they follow every
``self[id] = …`` as the global ones follow the length, so O(1) a change.
"""

from __future__ import annotations

from typing import Any

from flux.dispatcher.state.validation import utf8_bytes
from flux.domain.execution import Execution


class Unfinished(dict[str, Execution]):
    def __init__(self) -> None:
        super().__init__()
        self._sizes: dict[str, int] = {}
        self.input_bytes = 0
        # Per tenant: how many it holds here and their input bytes (absent = none).
        self._tenant_of: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._bytes: dict[str, int] = {}

    def count_of(self, tenant: str) -> int:
        return self._counts.get(tenant, 0)

    def bytes_of(self, tenant: str) -> int:
        return self._bytes.get(tenant, 0)

    def tenants(self) -> set[str]:
        """The tenants with unfinished executions here."""
        return set(self._counts)

    def __setitem__(self, execution_id: str, execution: Execution) -> None:
        if execution_id not in self._tenant_of:
            self._tenant_of[execution_id] = execution.tenant
            self._counts[execution.tenant] = self._counts.get(execution.tenant, 0) + 1
        super().__setitem__(execution_id, execution)

    def _forget(self, execution_id: str) -> None:
        size = self._sizes.pop(execution_id, 0)
        self.input_bytes -= size
        tenant = self._tenant_of.pop(execution_id, None)
        if tenant is None:
            return
        left = self._counts[tenant] - 1
        if left:
            self._counts[tenant] = left
        else:
            del self._counts[tenant]
        held = self._bytes.get(tenant, 0) - size
        if held:
            self._bytes[tenant] = held
        else:
            self._bytes.pop(tenant, None)

    def add(self, execution: Execution, inline_limit: int) -> Execution:
        """Hold a newly accepted (stored) execution; its input stays here only up to ``inline_limit`` bytes."""
        size = utf8_bytes(execution.input_json)
        if size > inline_limit:
            execution = execution.evolve(input_json="")
        execution_id = execution.execution_id
        change = size - self._sizes.get(execution_id, 0)
        self.input_bytes += change
        self._sizes[execution_id] = size
        self[execution_id] = execution
        tenant = self._tenant_of[execution_id]
        self._bytes[tenant] = self._bytes.get(tenant, 0) + change
        if not self._bytes[tenant]:
            del self._bytes[tenant]
        return execution

    def __delitem__(self, execution_id: str) -> None:
        super().__delitem__(execution_id)
        self._forget(execution_id)

    def pop(self, execution_id: str, *default: Any) -> Any:  # type: ignore[override]
        if execution_id in self:
            self._forget(execution_id)
        return super().pop(execution_id, *default)

    def clear(self) -> None:
        super().clear()
        self._sizes.clear()
        self.input_bytes = 0
        self._tenant_of.clear()
        self._counts.clear()
        self._bytes.clear()
