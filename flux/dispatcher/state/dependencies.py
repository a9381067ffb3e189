"""Executions waiting for others to end: held out of the queue, indexed by what they wait for.

A waiting execution is never in the pending queue (so the matcher never scans it, however many
wait): it is here, as the set of its dependencies that have not yet ended as its ``when`` asks,
and each of those dependencies maps back to it. Ending a dependency costs O(its dependents);
holding or forgetting a dependent costs O(its dependencies). Nothing here decides or writes:
``transitions/dependencies.py`` does, over what this index says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flux.domain.execution import Execution


class DependencyIndex:
    def __init__(self) -> None:
        # dependent id -> the ids of its dependencies it still waits for
        self.open: dict[str, set[str]] = {}
        # dependency id -> the ids of the dependents waiting for it
        self.dependents: dict[str, set[str]] = {}
        # Dependencies that ended, waiting for the transition's loop (a cascade is a worklist).
        self.backlog: list[Execution] = []
        self.busy = False
        # Reads of dependencies from the store in flight (kept so they are not collected).
        self.tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self.open)

    def __contains__(self, execution_id: str) -> bool:
        return execution_id in self.open

    def hold(self, execution_id: str, waiting_for: Iterable[str]) -> None:
        """Hold ``execution_id`` until each of ``waiting_for`` is ``satisfied``."""
        if execution_id in self.open:
            self.forget(execution_id)
        open_ = set(waiting_for)
        self.open[execution_id] = open_
        dependents = self.dependents
        for dependency in open_:
            held = dependents.get(dependency)
            if held is None:
                dependents[dependency] = {execution_id}
            else:
                held.add(execution_id)

    def waiting_on(self, dependency_id: str) -> list[str]:
        """The dependents still waiting for ``dependency_id``, in a stable order."""
        return sorted(self.dependents.get(dependency_id, ()))

    def satisfied(self, execution_id: str, dependency_id: str) -> bool:
        """``dependency_id`` ended as ``execution_id`` asked; whether it waits for nothing more now
        (then it is no longer held here)."""
        open_ = self.open.get(execution_id)
        if open_ is None:
            return False
        open_.discard(dependency_id)
        self._unlink(execution_id, dependency_id)
        if open_:
            return False
        del self.open[execution_id]
        return True

    def forget(self, execution_id: str) -> set[str]:
        """Stop holding ``execution_id`` (released, ended, or dropped); what it still waited for."""
        open_ = self.open.pop(execution_id, set())
        for dependency in open_:
            self._unlink(execution_id, dependency)
        return open_

    def _unlink(self, execution_id: str, dependency_id: str) -> None:
        dependents = self.dependents.get(dependency_id)
        if dependents is not None:
            dependents.discard(execution_id)
            if not dependents:
                del self.dependents[dependency_id]
