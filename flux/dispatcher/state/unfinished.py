"""The dispatcher's unfinished executions, and how many input bytes they stand for.

A pending input larger than the inline threshold lives only in the store: the
record here keeps ``input_json=""`` (never a valid input, which is at least
``null``) and the dispatch loads it on its way out. So 10,000 pending 64 KiB
inputs cost the records, not 640 MiB of RAM. The byte total counts every input,
kept here or not, because admission limits what the store is asked to hold.

Sizes follow the id, not the record: every way an execution leaves (finished,
cancelled, claimed by another replica, forgotten) goes through ``pop`` or
``del``, so the total cannot drift whichever path removed it.
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

    def add(self, execution: Execution, inline_limit: int) -> Execution:
        """Hold a newly accepted (stored) execution; its input stays here only up to ``inline_limit`` bytes."""
        size = utf8_bytes(execution.input_json)
        if size > inline_limit:
            execution = execution.evolve(input_json="")
        execution_id = execution.execution_id
        self.input_bytes += size - self._sizes.get(execution_id, 0)
        self._sizes[execution_id] = size
        self[execution_id] = execution
        return execution

    def __delitem__(self, execution_id: str) -> None:
        super().__delitem__(execution_id)
        self.input_bytes -= self._sizes.pop(execution_id, 0)

    def pop(self, execution_id: str, *default: Any) -> Any:  # type: ignore[override]
        if execution_id in self:
            self.input_bytes -= self._sizes.pop(execution_id, 0)
        return super().pop(execution_id, *default)

    def clear(self) -> None:
        super().clear()
        self._sizes.clear()
        self.input_bytes = 0
